"""``agentenvs train rl``: the RL loop from the command line.

    agentenvs train rl --algo ptgpo --model runs/sft/checkpoints/step-0000100/model \\
        --out runs/ptgpo data.env_id=TextCraft-v0 iterations=200
    agentenvs train rl --algo prefix-grpo --model SFT_DIR --queries samples.jsonl --out runs/pg

Settings come from the :class:`~agentenvs.train.rl.config.RLConfig` defaults, then ``--config FILE``
(YAML or TOML), then the ``key=value`` overrides (dotted keys reach sections:
``rollout.max_new_tokens=256``, ``loss.clip_high=0.3``). ``--protocol`` names the benchmark
protocol (:mod:`agentenvs.agents.protocols`; default: the environment's own): the
environment variant, prompt, parser, turn limit, history and sampling it fixes apply unless a
setting is given, and ``OUT/protocol.json`` records them. ``--resume`` continues from the
latest checkpoint under ``--out`` exactly.
"""

from __future__ import annotations

import argparse
import sys

from agentenvs.train.cli import command_config, require_training_extra
from agentenvs.train.rl.algorithms import ALGORITHMS

__all__ = ["rl_main"]

# flag -> the setting it sets
FLAGS = {
    "algo": "algo",
    "model": "model",
    "out": "out_dir",
    "env": "data.env_id",
    "protocol": "protocol",
    "queries": "data.queries",
    "env_workers": "rollout.env_workers",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentenvs train rl", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--algo", choices=sorted(ALGORITHMS), help="algorithm (same as algo=...)")
    parser.add_argument("--config", help="YAML or TOML file of RLConfig settings")
    parser.add_argument(
        "--model", help="policy to start from: a directory, hub id or embedded (model=...)"
    )
    parser.add_argument("--out", help="output directory (same as out_dir=...)")
    parser.add_argument("--env", help="environment id (same as data.env_id=...)")
    parser.add_argument(
        "--protocol",
        help="benchmark protocol: prefix-grpo or ptgpo (same as protocol=...; default: the "
        "environment's own, see docs/protocols.md)",
    )
    parser.add_argument("--queries", help="prefix-grpo: replay.sample file (data.queries=...)")
    parser.add_argument(
        "--env-workers",
        metavar="SPEC",
        help="where environments step (rollout.env_workers=...): inprocess, process:N, "
        "ray[:N][@ADDRESS] or http://HOST:PORT[,http://HOST2:PORT] (agentenvs serve servers)",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("overrides", nargs="*", help="key=value settings, e.g. iterations=50")
    return parser


def rl_main(argv: list[str]) -> int:
    args = _parser().parse_intermixed_args(argv)
    flags = {key: getattr(args, flag) for flag, key in FLAGS.items()}
    require_training_extra()
    from agentenvs.train.rl.config import RLConfig
    from agentenvs.train.rl.rollout import RolloutFailureError
    from agentenvs.train.rl.trainer import train_rl
    from agentenvs.train.runtime import NonFiniteLossError

    config = command_config(RLConfig, args.config, args.overrides, flags, resume=args.resume)
    try:
        final = train_rl(config, resume=args.resume, progress=not args.no_progress)
    except (NonFiniteLossError, RolloutFailureError) as exc:
        print(f"agentenvs train rl: {exc}", file=sys.stderr)
        return 1
    print(f"final checkpoint: {final} (load {final / 'model'} with transformers)")
    return 0
