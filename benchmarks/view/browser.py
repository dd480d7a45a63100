"""Headless Chromium for the page's checks: the system's browser driven by Playwright.

Playwright's own browser builds are never downloaded: :func:`launch` starts the Chromium the
system package installs (Debian's ``chromium``: ``apt-get install chromium``), found by
:func:`find_chromium` (``$AGENTENVS_CHROMIUM`` first). The tests and the load-time benchmark
(:mod:`agentenvs.benchmarks.view.load_time`) both use it.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

__all__ = ["CHROMIUM_ARGS", "ChromiumMissing", "find_chromium", "launch", "sync_playwright"]

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
_NAMES = ("chromium", "chromium-browser", "google-chrome")


class ChromiumMissing(RuntimeError):
    """No Chromium, or no Playwright to drive it (the message says what to install)."""


def find_chromium() -> str:
    """The Chromium executable: ``$AGENTENVS_CHROMIUM``, else the first of chromium,
    chromium-browser, google-chrome on PATH."""
    given = os.environ.get("AGENTENVS_CHROMIUM")
    if given:
        if not os.access(given, os.X_OK):
            raise ChromiumMissing(f"$AGENTENVS_CHROMIUM={given} is not an executable")
        return given
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ChromiumMissing(
        "no Chromium on PATH (looked for chromium, chromium-browser, google-chrome): install "
        "the system's package (apt-get install chromium) or set $AGENTENVS_CHROMIUM"
    )


def launch(playwright: Any) -> Any:
    """A headless Chromium browser of ``playwright`` (a started ``sync_playwright()``)."""
    return playwright.chromium.launch(executable_path=find_chromium(), args=list(CHROMIUM_ARGS))


def sync_playwright() -> Any:
    """Playwright's sync API entry, or :class:`ChromiumMissing` naming the package."""
    try:
        from playwright.sync_api import sync_playwright as start
    except ImportError as exc:
        raise ChromiumMissing(
            "Playwright is not installed: pip install playwright (its browser download is "
            "not needed: the system's Chromium is used)"
        ) from exc
    return start()
