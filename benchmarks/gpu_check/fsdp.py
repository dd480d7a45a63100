"""The ``torchrun_fsdp2`` step: ``torchrun --nproc_per_node=1`` of a worker that runs one PTGPO
iteration with the policy sharded by FSDP2.

:func:`agentenvs.train.distributed.init_distributed` treats a world of one process as no group
at all (nothing sharded), so the worker joins the group itself and hands the trainer a one-rank
context that shards (:class:`OneRankGroup`); ``sharded`` in the result says the model was an
FSDP module."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

import agentenvs.train.rl.trainer as trainer_module
from agentenvs.benchmarks.gpu_check.measure import check_device, peak_memory
from agentenvs.benchmarks.gpu_check.plan import DRY_RUN_PLAN, GPU_PLAN, CheckPlan, set_threads
from agentenvs.benchmarks.gpu_check.rl import (
    ITERATION_KEYS,
    policy_factory,
    rl_config,
    start_trainer,
)
from agentenvs.benchmarks.gpu_check.runner import TAIL_CHARS, StepTimeout
from agentenvs.train.device import pick_device
from agentenvs.train.distributed import DistContext, is_sharded
from agentenvs.train.rl import RLTrainer

__all__ = ["OneRankGroup", "fsdp_worker", "run_torchrun"]


class _OneRankContext(DistContext):
    """A one-rank context that says it is distributed, so the trainer shards and gathers."""

    @property
    def is_distributed(self) -> bool:
        return True


@dataclass
class OneRankGroup:
    """Builds the trainer's context under ``torchrun --nproc_per_node=1``: the process group
    joined here (NCCL on a GPU, gloo on CPU), and a one-rank
    :class:`~agentenvs.train.distributed.DistContext` that reports itself distributed, so the
    trainer shards the policy with FSDP2 and runs every collective on the one-rank group."""

    backend: str

    def __call__(self, device: str = "auto", timeout_minutes: float = 60.0) -> Any:
        wanted = pick_device(device)
        if wanted.type == "cuda":
            wanted = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(wanted)
        timeout = timedelta(minutes=timeout_minutes)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(self.backend, timeout=timeout)
        group = None
        if torch.distributed.get_backend() != "gloo":
            group = torch.distributed.new_group(backend="gloo", timeout=timeout)
        return _OneRankContext(0, 1, 0, wanted, group, True)


def fsdp_worker(args: argparse.Namespace) -> int:
    """The torchrun worker: one PTGPO iteration with the policy FSDP2-sharded; its figures go
    to ``OUT/worker.json``."""
    plan = DRY_RUN_PLAN if args.dry_run else GPU_PLAN
    plan = replace(plan, policy_options=dict(args.policy_opt))
    set_threads(plan)
    out = Path(args.out)
    result: dict[str, Any] = {"world_size": int(os.environ.get("WORLD_SIZE", "0"))}
    config = rl_config(
        plan,
        "ptgpo",
        args.model,
        out / "run",
        iterations=1,
        prompts=plan.fsdp_prompts,
        samples=plan.fsdp_samples,
    )
    trainer_module.init_distributed = OneRankGroup(plan.distributed_backend)
    trainer = RLTrainer(config, progress=False, policy_factory=policy_factory(plan))
    with peak_memory(check_device(plan), result):
        start_trainer(trainer)
        try:
            metrics = trainer.iteration()
        finally:
            trainer.close()
            trainer.logger.close()
    result.update(
        backend=torch.distributed.get_backend(),
        sharded=is_sharded(trainer.model),
        **{k: float(metrics.get(v, 0.0)) for k, v in ITERATION_KEYS.items()},
    )
    trainer.dist.close()
    (out / "worker.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def run_torchrun(
    plan: CheckPlan, model_dir: str, out: Path, timeout: float, dry_run: bool
) -> dict[str, Any]:
    """``torchrun --nproc_per_node=1`` of :func:`fsdp_worker`, within ``timeout`` seconds."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        "agentenvs.benchmarks.gpu_check",
        "--fsdp-worker",
        "--model",
        model_dir,
        "--out",
        str(out),
        *(["--dry-run"] if dry_run else []),
        *(f"--policy-opt={k}={json.dumps(v)}" for k, v in plan.policy_options.items()),
    ]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if dry_run:
        env["OMP_NUM_THREADS"] = "1"
    clock = time.perf_counter()
    log = out / "torchrun.log"
    returncode = _run_stoppable(command, env, log, timeout)
    wall = time.perf_counter() - clock
    report = out / "worker.json"
    if returncode != 0 or not report.exists():
        tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        raise RuntimeError(f"torchrun exited {returncode}; output tail:\n{tail}")
    result = json.loads(report.read_text())
    if not result.get("rows") or not result.get("optimizer_steps"):
        raise RuntimeError(f"the iteration under torchrun trained nothing: {result}")
    if not result.get("sharded"):
        raise RuntimeError(f"the policy was not FSDP-sharded under torchrun: {result}")
    return {"command": " ".join(command[2:]), "wall_s": wall, **result}


def _run_stoppable(command: list[str], env: dict[str, str], log: Path, timeout: float) -> int:
    """Run ``command`` in its own session with its output in ``log``; past ``timeout`` (or on
    the step's alarm, or Ctrl-C) end it and its children together. Returns its exit code."""
    with log.open("w") as sink:
        proc = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=max(timeout - 3, 1))
        except BaseException as exc:  # its timeout, the step's alarm, Ctrl-C: end it all
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if not isinstance(exc, (subprocess.TimeoutExpired, StepTimeout)):
                raise
            tail = log.read_text(errors="replace")[-TAIL_CHARS:]
            message = f"torchrun stopped after {timeout:.0f} s; output tail:\n{tail}"
            raise StepTimeout(message) from None
