"""replay: teacher trajectories -> replay-validated cut-state queries with prefix sidecars.

Prefix-GRPO's data side (the Prefix-GRPO paper, §3.1-3.2, appendix 6.2-6.3):

* :mod:`agentenvs.replay.cuts` — cut selection (entropy-change, raw-entropy, fixed-ratio; one raw
  no-prefix query per trajectory), on :mod:`agentenvs.replay.scoring`'s teacher-forced entropy;
* :mod:`agentenvs.replay.validate` — replay validation (validated / mismatch / unverifiable / error)
  with snapshot reuse across the cuts of one trajectory;
* :mod:`agentenvs.replay.sidecar` — canonical prompts and prefix sidecars (span, mask, old
  log-probs);
* :mod:`agentenvs.replay.stages` — the file-to-file stages behind ``agentenvs replay
  cuts|validate|sidecar``.

Importing this package does not import torch; the model is loaded only by the stages that need it.
"""

from __future__ import annotations

from agentenvs.replay.cuts import (
    FIXED_RATIO_PRESETS,
    CutConfig,
    CutStrategy,
    SelectedCut,
    change_scores,
    fixed_ratio_turns,
    queries_for_trajectory,
    select_cuts,
    smooth_centered,
    token_scores,
    top_k_turns,
)
from agentenvs.replay.io import (
    QUERY_SCHEMA,
    SAMPLE_SCHEMA,
    VALIDATED_SCHEMA,
    StageFileError,
    read_rows,
    write_rows,
)
from agentenvs.replay.query import (
    RAW_STRATEGY,
    CutQuery,
    DroppedCut,
    TrajectoryShapeError,
    build_query,
    raw_query,
)
from agentenvs.replay.sidecar import (
    PrefixSidecar,
    canonical_messages,
    compute_sidecars,
    sidecar_violations,
)
from agentenvs.replay.stages import run_cuts, run_sidecar, run_validate
from agentenvs.replay.validate import (
    EnvPool,
    ReplayStats,
    TrajectoryReplayer,
    ValidationResult,
    ValidationStatus,
    validate_queries,
)

__all__ = [
    "FIXED_RATIO_PRESETS",
    "QUERY_SCHEMA",
    "RAW_STRATEGY",
    "SAMPLE_SCHEMA",
    "VALIDATED_SCHEMA",
    "CutConfig",
    "CutQuery",
    "CutStrategy",
    "DroppedCut",
    "EnvPool",
    "PrefixSidecar",
    "ReplayStats",
    "SelectedCut",
    "StageFileError",
    "TrajectoryReplayer",
    "TrajectoryShapeError",
    "ValidationResult",
    "ValidationStatus",
    "build_query",
    "canonical_messages",
    "change_scores",
    "compute_sidecars",
    "fixed_ratio_turns",
    "queries_for_trajectory",
    "raw_query",
    "read_rows",
    "run_cuts",
    "run_sidecar",
    "run_validate",
    "select_cuts",
    "sidecar_violations",
    "smooth_centered",
    "token_scores",
    "top_k_turns",
    "validate_queries",
    "write_rows",
]
