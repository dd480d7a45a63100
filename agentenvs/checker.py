"""Checks that an environment keeps the agentenvs contract (docs/architecture.md, "The
environment contract").

A check that fails raises :class:`ContractError` (an ``AssertionError``) naming the rule that
broke and the values it saw. :func:`check_plugin` runs every check on an installed environment
plugin, from its parts loading to determinism in other processes (docs/extending.md).

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
    "ContractError",
    "check_plugin",
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


class ContractError(AssertionError):
    """An environment broke a rule of the contract; the message names the rule and the values
    the checker saw."""


def _require(ok: bool, rule: str, **seen: Any) -> None:
    """Raise :class:`ContractError` naming ``rule`` and the ``seen`` values unless ``ok``."""
    if not ok:
        values = "; ".join(f"{k}: {_short(v)}" for k, v in seen.items())
        raise ContractError(
            f"contract rule broken: {rule}" + (f" (saw {values})" if values else "")
        )


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> dict[str, Any]:
    """Where two step lists part: the index and both sides there (for a message)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return {"first differing step": i, "expected": x, "got": y}
    return {"expected steps": len(a), "got steps": len(b)}


def check_info(info: dict[str, Any]) -> None:
    """Every contract key is present with its type."""
    for key, kind in INFO_KEYS.items():
        _require(key in info, f"info has the key {key!r}", info_keys=sorted(info))
        _require(
            isinstance(info[key], kind),
            f"info[{key!r}] is of type {kind}",
            type=type(info[key]).__name__,
            value=info[key],
        )
    if info["admissible_actions"] is not None:
        bad = [a for a in info["admissible_actions"] if not isinstance(a, str)]
        _require(not bad, "info['admissible_actions'] holds strings only", not_strings=bad)


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
    _require(
        restored == snap, "a snapshot survives pickling unchanged", before=snap, after=restored
    )
    obs, info = fresh.restore(restored)
    _require(
        obs == at_snapshot,
        "restore() returns the observation at the snapshot",
        at_snapshot=at_snapshot,
        restored=obs,
    )
    check_info(info)
    _require(
        fresh.turn == snap.turn,
        "a restored instance is at the snapshot's turn",
        snapshot_turn=snap.turn,
        restored_turn=fresh.turn,
    )
    got = _run(fresh, continuation)
    _require(
        got == expected,
        "a snapshot restored into a fresh instance continues as the original did",
        task_id=task_id,
        prefix=list(prefix),
        **_first_difference(expected, got),
    )

    # restore into the same, already-diverged instance
    env.restore(snap)
    again = _run(env, continuation)
    _require(
        again == expected,
        "a snapshot restored into its own, diverged instance continues as before",
        task_id=task_id,
        prefix=list(prefix),
        **_first_difference(expected, again),
    )
    return snap


def check_replay(env: TextEnv, task_id: str, actions: Sequence[str]) -> None:
    """``replay`` gives exactly what reset + stepping by hand gives."""
    by_hand_obs, by_hand_info = env.reset(options={"task_id": task_id})
    by_hand = _run(env, actions)
    replayed = env.replay(task_id, actions[: len(by_hand)])
    _require(
        replayed.observation == by_hand_obs,
        "replay() starts with reset()'s observation",
        reset=by_hand_obs,
        replay=replayed.observation,
    )
    _require(
        replayed.info == by_hand_info,
        "replay() starts with reset()'s info",
        reset=by_hand_info,
        replay=replayed.info,
    )
    steps = [tuple(s) for s in replayed.steps]
    _require(
        steps == by_hand,
        "replay() gives every step that stepping by hand gives",
        task_id=task_id,
        **_first_difference(by_hand, steps),
    )


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
    # the parent's import path, so that the child finds the same environments (plugins too)
    path = os.pathsep.join([p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=path.rstrip(os.pathsep))
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
            raise ContractError(
                f"contract rule broken: step() never raises for a bad action ({env.env_id} "
                f"raised {type(exc).__name__}: {exc} on {ascii(action[:200])}, "
                f"{len(action)} characters)"
            ) from exc
        _require(
            env.observation_space.contains(obs),
            f"every observation is inside observation_space ({env.observation_space})",
            observation_characters=len(obs),
            action=f"{ascii(action[:200])} ({len(action)} characters)",
        )
        check_info(info)
        _require(
            isinstance(reward, float) and math.isfinite(reward),
            "the reward is a finite float",
            reward=reward,
            action=ascii(action[:200]),
        )
        valid += info["valid"]
    return valid


def check_contract(
    env: TextEnv, task_id: str, actions: Sequence[str], *, split: str | None = None
) -> None:
    """The whole contract on one task and action sequence: info keys on reset and each step,
    ``task_ids``/``family``, snapshot round trip at the middle, and ``replay``."""
    obs, info = env.reset(options={"task_id": task_id})
    _require(isinstance(obs, str), "reset() returns a str observation", type=type(obs).__name__)
    check_info(info)
    variant = env.variant
    _require(
        isinstance(variant, dict) and json.loads(json.dumps(variant, default=repr)) == variant,
        "env.variant is a JSON-ready dict",
        variant=variant,
    )
    _require(
        info["task_id"] == task_id,
        "reset(options={'task_id': id}) loads that task (info['task_id'] is the id)",
        asked=task_id,
        info_task_id=info["task_id"],
    )
    _require(info["turn"] == 0, "reset() starts at turn 0", turn=info["turn"])
    if split is not None:
        ids = env.task_ids(split)
        _require(
            task_id in ids,
            f"the task id is in task_ids({split!r})",
            task_id=task_id,
            split_size=len(ids),
            first_ids=ids[:5],
        )
    for i, result in enumerate(_run(env, actions)):
        check_info(result[4])
        _require(
            isinstance(result[1], float),
            "step() returns a float reward",
            step=i,
            reward=result[1],
            type=type(result[1]).__name__,
        )
    half = len(actions) // 2
    check_snapshot_roundtrip(type(env), task_id, actions[:half], actions[half:])
    check_replay(env, task_id, actions)


def _expert_actions(env: TextEnv, env_id: str, task_id: str) -> list[str]:
    """The expert's actions on ``task_id`` (none where the plugin has no expert)."""
    from agentenvs.expert import EXPERTS, ExpertFailure, make_expert

    if env_id not in EXPERTS:
        return []
    expert = make_expert(env_id)
    expert.reset()
    env.reset(options={"task_id": task_id})
    actions = []
    while not env.done:
        try:
            action = expert.act(env).action
        except ExpertFailure:
            break
        _require(isinstance(action, str), "the expert's action is a str", action=action)
        actions.append(action)
        env.step(action)
    return actions


def _check_parts(env_id: str) -> type:
    """The plugin's parts load and agree with it; returns the environment class."""
    from agentenvs.plugins import load_part, plugin
    from agentenvs.registration import env_class

    entry = plugin(env_id)
    cls = env_class(env_id)
    _require(
        issubclass(cls, TextEnv),
        "the plugin's env is a subclass of agentenvs.core.TextEnv",
        env=entry.env,
        bases=[b.__name__ for b in cls.__mro__],
    )
    _require(
        cls.env_id == env_id,
        "the environment class's env_id is the plugin's",
        plugin=env_id,
        env_class=cls.env_id,
    )
    _require(
        tuple(cls.splits) == tuple(entry.splits),
        "the plugin's splits are the environment class's",
        plugin=entry.splits,
        env_class=cls.splits,
    )
    for part in ("prompts", "protocols"):
        load_part(env_id, part)  # a PluginError naming the distribution if it does not load
    return cls


def check_plugin(
    env_id: str,
    *,
    task_id: str | None = None,
    fuzz: int = 300,
    hash_seeds: Sequence[str] = ("1", "2"),
) -> None:
    """Every check on the installed environment plugin ``env_id``: its parts load and agree
    (class, expert, prompts, protocols, splits); ``agentenvs.make`` gives an instance; every
    split lists string ids with string families; the whole contract (:func:`check_contract`)
    on ``task_id`` (default: the first test task) with the expert's actions; ``fuzz`` hostile
    actions (:func:`check_fuzz`); the same observations in new processes under each of
    ``hash_seeds`` as ``PYTHONHASHSEED``."""
    from agentenvs.registration import make

    _check_parts(env_id)
    env = make(env_id)
    _require(isinstance(env, TextEnv), "agentenvs.make gives a TextEnv", got=type(env).__name__)
    for split in env.splits:
        ids = env.task_ids(split)
        _require(
            isinstance(ids, list) and bool(ids) and all(isinstance(t, str) for t in ids),
            f"task_ids({split!r}) is a non-empty list of str",
            got=ids[:5] if isinstance(ids, list) else ids,
        )
        family = env.family(ids[0])
        _require(isinstance(family, str), "family() is a str", task_id=ids[0], family=family)
    split = "test" if "test" in env.splits else env.splits[0]
    task_id = task_id or env.task_ids(split)[0]
    actions = _expert_actions(env, env_id, task_id) or ["look"]
    check_contract(env, task_id, actions, split=split if task_id in env.task_ids(split) else None)
    check_fuzz(env, env.task_ids(split)[:5], hostile_actions(0, fuzz))
    obs, info = env.reset(options={"task_id": task_id})
    here = [[obs, 0.0, False, False, info]]
    here += [list(step) for step in _run(env, actions)]
    expected = json.loads(json.dumps(here, sort_keys=True, default=str))
    for seed in hash_seeds:
        got = rollout_in_subprocess(env_id, task_id, actions, hash_seed=seed)
        _require(
            got == expected,
            "the same task and actions give the same steps in another process",
            PYTHONHASHSEED=seed,
            **_first_difference(expected, got),
        )
