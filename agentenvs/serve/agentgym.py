"""AgentGym's HTTP routes (filled in by the AgentGym step)."""

from __future__ import annotations

from typing import Any


def agentgym_router(service: Any) -> Any:
    return None
