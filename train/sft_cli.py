"""``agentenvs train sft``: supervised fine-tuning on trajectories, with the loss on assistant
tokens only (:mod:`agentenvs.train.sft`).

    agentenvs train sft --model DIR --data trajectories.jsonl --out runs/sft [key=value ...]
    torchrun --nproc-per-node=8 -m agentenvs.cli train sft --model DIR --data T.jsonl --out D

Settings come from the :class:`~agentenvs.train.sft.SFTConfig` defaults, then ``--config FILE``
(YAML or TOML), then the ``key=value`` overrides. ``--resume`` continues from the latest
checkpoint under ``--out`` exactly.
"""

from __future__ import annotations

import argparse
import os

from agentenvs.train.cli import command_config, require_training_extra

__all__ = ["sft_main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentenvs train sft",
        description=__doc__.split("\n\n")[0],
        epilog="settings: the fields of agentenvs.train.sft.SFTConfig (docs/training.md)",
    )
    parser.add_argument("--config", help="YAML or TOML file of SFTConfig settings")
    parser.add_argument("--model", help="model directory, hub id or embedded (model=...)")
    parser.add_argument("--data", nargs="+", help="trajectory JSONL files (same as data=...)")
    parser.add_argument("--out", help="output directory (same as out_dir=...)")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("overrides", nargs="*", help="key=value settings, e.g. lr=2e-5 epochs=3")
    return parser


def sft_main(argv: list[str]) -> int:
    args = _parser().parse_intermixed_args(argv)
    flags = {"model": args.model, "data": ",".join(args.data or ()), "out_dir": args.out}
    require_training_extra()
    from agentenvs.train.sft import SFTConfig, train_sft

    config = command_config(SFTConfig, args.config, args.overrides, flags, resume=args.resume)
    final = train_sft(config, resume=args.resume, progress=not args.no_progress)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"final checkpoint: {final} (load {final / 'model'} with transformers)")
    return 0
