"""Write verl's parquet dataset for one environment's split.

    python -m agentenvs.integrations.verl.dataset TextCraft-v0 --split train -o data/textcraft
    # -> data/textcraft/train.parquet, one row per task
    python -m agentenvs.integrations.verl.dataset TextCraft-v0 --queries runs/prefix/samples.jsonl \
        -o data/textcraft-prefix
    # -> data/textcraft-prefix/queries.parquet, one row per Prefix-GRPO cut-state query

Each row has the columns verl's ``RLHFDataset`` reads: ``data_source``
(``agentenvs/<ENV>``), ``prompt`` (the environment's system prompt, where it has one, and a user
turn naming the task: the agent loop replaces it with the reset observation), ``ability``
(``agent``), ``reward_model`` (``{"style": "agentenvs", "ground_truth": ""}``: the reward is the
environment's), ``agent_name`` (``agentenvs_agent``, the loop of
:mod:`agentenvs.integrations.verl.agent_loop`) and ``extra_info`` (``env_id``, ``task_id``,
``split``, ``index``, ``protocol``; verl hands it to the agent loop).

``--protocol NAME`` (default: the environment's default protocol,
:data:`agentenvs.agents.protocols.DEFAULT_PROTOCOLS`; ``none``: no protocol) chooses the benchmark
protocol the rows are played under: the system prompt is the protocol's, the task split comes
from the environment made with its keywords, and ``extra_info["protocol"]`` (its name, or
``"none"``) tells the agent loop which rules to apply.

With ``--queries`` (a ``replay`` stage file: queries, validated queries or samples) each row is
one cut-state query of that environment instead: ``extra_info`` also carries ``query_id``,
``family`` and ``prefix_replies`` (the teacher's assistant turns before the cut), which the agent
loop replays as prefix tokens of the response (Prefix-GRPO,
:mod:`agentenvs.integrations.verl.prefix_loss`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenvs.agents.episode import make_env
from agentenvs.agents.prompts import system_prompt
from agentenvs.agents.protocol_rules import ProtocolRules

__all__ = [
    "AGENT_NAME",
    "NO_PROTOCOL",
    "dataset_rows",
    "dataset_rows_for",
    "main",
    "protocol_arg",
    "query_rows",
    "write_dataset",
]

AGENT_NAME = "agentenvs_agent"
NO_PROTOCOL = "none"
"""``extra_info["protocol"]`` (and ``--protocol``) of rows played without a protocol."""


def protocol_arg(value: str | None) -> str | None:
    """A protocol as rows and the command line spell it (``"none"``: None) -> its argument to
    :meth:`agentenvs.agents.protocol_rules.ProtocolRules.of`."""
    return None if value is None or value == NO_PROTOCOL else str(value)


def dataset_rows(
    env_id: str, split: str, limit: int | None = None, protocol: str | None = "default"
) -> list[dict[str, Any]]:
    """The rows of ``env_id``'s ``split`` (its first ``limit`` tasks) under ``protocol``."""
    rules = ProtocolRules.of(env_id, protocol)
    env, _ = make_env(env_id, **rules.env_kwargs())
    task_ids = list(env.task_ids(split))[:limit]
    env.close()
    return dataset_rows_for(env_id, task_ids, split, protocol)


def query_rows(
    env_id: str, queries: str | Path, limit: int | None = None, protocol: str | None = "default"
) -> list[dict[str, Any]]:
    """The rows of the cut-state queries of ``env_id`` in a replay stage file."""
    import json

    from agentenvs.replay.io import read_rows
    from agentenvs.replay.query import CutQuery

    if ProtocolRules.of(env_id, protocol).prompt.style != "chat":
        raise ValueError(f"{env_id} has a template-style prompt: cut-state starts need a chat one")
    with Path(queries).open(encoding="utf-8") as fh:
        first = next((line for line in fh if line.strip()), "{}")
    schema = str(json.loads(first).get("schema", ""))
    rows: list[dict[str, Any]] = []
    for row in read_rows(queries, schema, limit=limit):
        q = CutQuery.from_row(row)
        if q.env_id != env_id:
            continue
        replies = [m["content"] for m in q.messages if m.get("role") == "assistant"]
        (base,) = dataset_rows_for(env_id, [q.task_id], "queries", protocol)
        base["extra_info"].update(
            index=len(rows), query_id=q.query_id, family=q.family, prefix_replies=replies
        )
        rows.append(base)
    return rows


def dataset_rows_for(
    env_id: str, task_ids: Sequence[str], split: str, protocol: str | None = "default"
) -> list[dict[str, Any]]:
    """One row per task id (see the module docstring)."""
    rules = ProtocolRules.of(env_id, protocol)
    name = rules.name if rules.name is not None else NO_PROTOCOL
    system = system_prompt(env_id, rules.prompt_name)
    head = [{"role": "system", "content": system}] if system else []
    return [
        {
            "data_source": f"agentenvs/{env_id}",
            "prompt": [*head, {"role": "user", "content": f"{env_id} task {task_id}"}],
            "ability": "agent",
            "reward_model": {"style": "agentenvs", "ground_truth": ""},
            "agent_name": AGENT_NAME,
            "extra_info": {
                "env_id": env_id,
                "task_id": task_id,
                "split": split,
                "index": i,
                "protocol": name,
            },
        }
        for i, task_id in enumerate(task_ids)
    ]


def write_dataset(
    env_id: str,
    split: str,
    out_dir: str | Path,
    limit: int | None = None,
    queries: str | Path | None = None,
    protocol: str | None = "default",
) -> Path:
    """Write ``<out_dir>/<split>.parquet`` (``queries.parquet`` with ``queries``); returns
    its path."""
    import pandas as pd

    if queries is not None:
        rows, split = query_rows(env_id, queries, limit, protocol), "queries"
        if not rows:
            raise ValueError(f"{queries} has no query of {env_id}")
    else:
        rows = dataset_rows(env_id, split, limit, protocol)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{split}.parquet"
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agentenvs.integrations.verl.dataset",
        description="Write verl's parquet dataset (one row per task) for an environment's split.",
    )
    parser.add_argument("env_id", help="an agentenvs id, e.g. TextCraft-v0")
    parser.add_argument("--split", default="train", help="the task split (default: train)")
    parser.add_argument("-o", "--out", required=True, help="output directory")
    parser.add_argument("--limit", type=int, default=None, help="keep the first N tasks")
    parser.add_argument(
        "--queries", default=None, help="a replay stage file: one row per cut-state query instead"
    )
    parser.add_argument(
        "--protocol",
        default="default",
        help="the benchmark protocol the rows play under (default: the environment's; "
        f"{NO_PROTOCOL!r}: none; e.g. prefix-grpo, ptgpo)",
    )
    args = parser.parse_args(argv)
    import gymnasium as gym

    protocol = protocol_arg(args.protocol)
    try:
        path = write_dataset(args.env_id, args.split, args.out, args.limit, args.queries, protocol)
    except (ValueError, KeyError, OSError, gym.error.Error) as err:  # bad id, split or file
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
