"""``python -m agentenvs.benchmarks.gpu_check``: :func:`agentenvs.benchmarks.gpu_check.cli.main`."""

from __future__ import annotations

import sys

from agentenvs.benchmarks.gpu_check.cli import main

sys.exit(main())
