"""The machine a measurement ran on, as the results files and pages name it."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_model"]


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``; the platform's processor name elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
