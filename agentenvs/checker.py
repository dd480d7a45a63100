"""Checks that an environment keeps the agentenvs contract (docs/architecture.md, "The environment contract").

Like ``gymnasium.utils.env_checker`` for the parts Gymnasium does not know about: the ``info``
keys, snapshot/restore (in-process, after pickling, and in another process), ``replay``, and
determinism under different ``PYTHONHASHSEED`` values. Every environment's test suite uses these,
and so can anyone writing a new environment::

    from agentenvs.checker import check_contract
    check_contract(MyEnv(), task_id="mine/0", actions=["look", "go north"])
"""

from __future__ import annotations

import json
import os
import pickle
import random
import string
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agentenvs.core import Snapshot, TextEnv

__all__ = [
    "INFO_KEYS",
    "check_contract",
    "check_info",
    "check_replay",
    "check_snapshot_roundtrip",
    "check_fuzz",
    "fuzz_actions",
    "hostile_actions",
    "rollout_in_subprocess",
]

INFO_KEYS: dict[str, type | tuple[type, ...]] = {
    "task_id": str,
    "family": str,
    "won": bool,
    "valid": bool,
    "turn": int,
    "admissible_actions": (list, type(None)),
    "fields": dict,
}


def check_info(info: dict[str, Any]) -> None:
    """Every contract key is present with its type."""
    for key, kind in INFO_KEYS.items():
        assert key in info, f"info lacks {key!r}: {sorted(info)}"
        assert isinstance(info[key], kind), f"info[{key!r}] is {type(info[key]).__name__}"
    if info["admissible_actions"] is not None:
        assert all(isinstance(a, str) for a in info["admissible_actions"])


def _run(env: TextEnv, actions: Sequence[str]) -> list[tuple[str, float, bool, bool, dict]]:
    out = []
    for action in actions:
        if env.done:
            break
        out.append(env.step(action))
    return out


def check_snapshot_roundtrip(
    make_env: Callable[[], TextEnv],
    task_id: str,
    prefix: Sequence[str],
    continuation: Sequence[str],
) -> Snapshot:
    """Snapshot after ``prefix``; a pickled copy restored into a fresh instance must give the
    same observations, rewards and infos for ``continuation`` as the original instance, and the
    original must also be restorable into itself after diverging. Returns the snapshot."""
    env = make_env()
    env.reset(options={"task_id": task_id})
    _run(env, prefix)
    at_snapshot = env.observation
    snap = env.snapshot()
    blob = pickle.dumps(snap)
    expected = _run(env, continuation)

    fresh = make_env()
    restored = pickle.loads(blob)
    assert restored == snap, "a snapshot must survive pickling unchanged"
    obs, info = fresh.restore(restored)
    assert obs == at_snapshot
    check_info(info)
    assert fresh.turn == snap.turn
    got = _run(fresh, continuation)
    assert got == expected, "restored instance diverged from the original"

    # restore into the same, already-diverged instance
    env.restore(snap)
    assert _run(env, continuation) == expected
    return snap


def check_replay(env: TextEnv, task_id: str, actions: Sequence[str]) -> None:
    """``replay`` gives exactly what reset + stepping by hand gives."""
    by_hand_obs, by_hand_info = env.reset(options={"task_id": task_id})
    by_hand = _run(env, actions)
    replayed = env.replay(task_id, actions[: len(by_hand)])
    assert replayed.observation == by_hand_obs
    assert replayed.info == by_hand_info
    assert [tuple(s) for s in replayed.steps] == by_hand


_ROLLOUT_SCRIPT = """
import json, sys
import agentenvs
env_id, task_id, actions = json.loads(sys.argv[1])
env = agentenvs.make(env_id)
obs, info = env.reset(options={"task_id": task_id})
out = [[obs, 0.0, False, False, info]]
for a in actions:
    if env.done:
        break
    out.append(list(env.step(a)))
print(json.dumps(out, sort_keys=True, default=str))
"""


def rollout_in_subprocess(
    env_id: str, task_id: str, actions: Sequence[str], *, hash_seed: str = "0", timeout: float = 300
) -> list[Any]:
    """Run ``actions`` on ``task_id`` in a new Python process with ``PYTHONHASHSEED=hash_seed``;
    returns every (observation, reward, terminated, truncated, info) as JSON values."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    payload = json.dumps([env_id, task_id, list(actions)])
    proc = subprocess.run(
        [sys.executable, "-c", _ROLLOUT_SCRIPT, payload],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess rollout failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


_PIECES = (
    "",
    " ",
    "\n",
    "\t",
    "[[",
    "]]",
    "[",
    "]",
    "(",
    ")",
    ",",
    ":",
    "0",
    "1",
    "-1",
    "99999999999",
    "craft",
    "get",
    "using",
    "go",
    "to",
    "take",
    "put",
    "click",
    "search",
    "up",
    "left",
    "inventory",
    "look",
    "Action:",
    "é",
    "√",
    "\x00",
    "日本",
    "🙂",
    "None",
    "{}",
    "\\",
)


def fuzz_actions(seed: int, n: int, extra_pieces: Sequence[str] = ()) -> Iterator[str]:
    """``n`` random and malformed action strings (local seeded generator)."""
    rng = random.Random(seed)
    pieces = list(_PIECES) + list(extra_pieces)
    alphabet = string.printable + "éüß√日本🙂\x00\x7f"
    for i in range(n):
        kind = i % 3
        if kind == 0:
            yield "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        elif kind == 1:
            yield " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        else:
            base = rng.choice(pieces)
            yield base * rng.randint(1, 300)


_BRACKETS = "[]{}()<>\"'`"
_HOSTILE_CHARS = (
    string.printable
    + "\x00\x01\x1b\x7f\x85\xa0\u200b\u200f\u202e\u2028\ufeff\ufffd"
    + "éüßİıﬁ√日本語🙂👍🏽\U0010ffff"
    + "\ud800\udbff\udc00\udfff"  # lone surrogates
    + "\u0301\u0338"  # combining marks
)
_DIGIT_RUNS = (1, 2, 19, 20, 310, 4299, 4300, 4301, 5000, 20_000)


def hostile_actions(
    seed: int, n: int, templates: Sequence[str] = (), extra_pieces: Sequence[str] = ()
) -> Iterator[str]:
    """``n`` hostile action strings (local seeded generator): random Unicode with NUL, control
    characters and lone surrogates, piece soup, bracket soup, long repetitions, 100,000-character
    strings, and ``templates`` (``"get {} quartz"``) filled with digit runs up to 20,000 digits
    (past Python's int/str conversion limit) or with garbage. Every 500th action is over
    100,000 characters long."""
    rng = random.Random(seed)
    pieces = list(_PIECES) + list(extra_pieces) + [t.replace("{}", "") for t in templates]
    for i in range(n):
        if i % 500 == 499:
            base = rng.choice(pieces) or "x"
            yield (base * (100_001 // len(base) + 1))[: rng.randint(100_000, 100_050)]
            continue
        kind = i % 7
        if kind == 0:
            yield "".join(rng.choice(_HOSTILE_CHARS) for _ in range(rng.randint(0, 60)))
        elif kind == 1:
            yield " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        elif kind == 2:
            yield (rng.choice(pieces) or " ") * rng.randint(1, 400)
        elif kind == 3:
            yield "".join(rng.choice(_BRACKETS) for _ in range(rng.randint(1, 200)))
        elif templates and kind in (4, 5):
            template = rng.choice(templates)
            if kind == 4:
                filler = rng.choice("90") + "9" * (rng.choice(_DIGIT_RUNS) - 1)
            else:
                filler = "".join(rng.choice(_HOSTILE_CHARS) for _ in range(rng.randint(0, 30)))
            yield template.replace("{}", filler)
        else:
            yield rng.choice(templates or pieces).replace("{}", str(rng.randint(-2, 12)))


def check_fuzz(
    env: TextEnv, task_ids: Sequence[str], actions: Iterator[str] | Sequence[str]
) -> int:
    """Step every action (resetting to the next of ``task_ids`` whenever an episode ends):
    no exception, every observation inside ``observation_space``, the contract's info keys,
    a finite float reward. Returns how many actions were valid."""
    import math

    task_ids = list(task_ids)
    episodes = 0
    obs, info = env.reset(options={"task_id": task_ids[0]})
    valid = 0
    for action in actions:
        if env.done:
            episodes += 1
            obs, info = env.reset(options={"task_id": task_ids[episodes % len(task_ids)]})
        try:
            obs, reward, _terminated, _truncated, info = env.step(action)
        except Exception as exc:
            raise AssertionError(
                f"{env.env_id} raised {type(exc).__name__}: {exc} on {ascii(action[:200])}"
                f" ({len(action)} characters)"
            ) from exc
        assert env.observation_space.contains(obs), (
            f"observation of {len(obs)} characters is outside {env.observation_space} after "
            f"{ascii(action[:200])} ({len(action)} characters)"
        )
        check_info(info)
        assert isinstance(reward, float) and math.isfinite(reward), reward
        valid += info["valid"]
    return valid


def check_contract(
    env: TextEnv, task_id: str, actions: Sequence[str], *, split: str | None = None
) -> None:
    """The whole contract on one task and action sequence: info keys on reset and each step,
    ``task_ids``/``family``, snapshot round trip at the middle, and ``replay``."""
    obs, info = env.reset(options={"task_id": task_id})
    assert isinstance(obs, str)
    check_info(info)
    variant = env.variant
    assert isinstance(variant, dict) and json.loads(json.dumps(variant)) == variant, (
        f"env.variant must be JSON-ready, got {variant!r}"
    )
    assert info["task_id"] == task_id and info["turn"] == 0
    if split is not None:
        assert task_id in env.task_ids(split)
    for result in _run(env, actions):
        check_info(result[4])
        assert isinstance(result[1], float)
    half = len(actions) // 2
    check_snapshot_roundtrip(type(env), task_id, actions[:half], actions[half:])
    check_replay(env, task_id, actions)
