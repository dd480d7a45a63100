"""The criteria and memory guard of ``serve_scale``, shared by the run and its report."""

from __future__ import annotations

__all__ = [
    "ALFWORLD_MEASURED_SESSION_BYTES",
    "ALFWORLD_MEMORY_BUDGET",
    "ALFWORLD_SESSION_BYTES",
    "ALFWORLD_SESSION_MARGIN",
    "SUCCESS_FLOOR",
]

SUCCESS_FLOOR = 0.95
"""OpenEnv's criterion: a level counts when at least 95% of its sessions succeed."""
ALFWORLD_MEMORY_BUDGET = 12 * 2**30
"""ALFWorld levels run only while sessions x :data:`ALFWORLD_SESSION_BYTES` fit this (about half
of this machine's 23 GiB)."""
ALFWORLD_MEASURED_SESSION_BYTES = 1_000_000
"""RSS per live ALFWorld session, rounded up from ``session_memory`` (8 test games x 8 sessions,
0.946 MB on 2026-12-05: ``python -m agentenvs.benchmarks.speed.session_memory ALFWorld-v0``)."""
ALFWORLD_SESSION_MARGIN = 2.0
"""The guard's margin over the measure: the scale run spreads its sessions over 200 games on
every worker, and a game's first session costs more than the next ones (per-game data: 6.7 MB
for 8 games x 1 session in the same measure), and its sessions step on between think times."""
ALFWORLD_SESSION_BYTES = int(ALFWORLD_MEASURED_SESSION_BYTES * ALFWORLD_SESSION_MARGIN)
"""Memory the guard counts per ALFWorld session."""
