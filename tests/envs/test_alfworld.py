"""ALFWorld-v0: the real engine behind the uniform API, on a few bundled games and a hand-made one.

The reference ("original") is what AgentGym's ALFWorld server does: textworld's gym batch env over
the game file with alfworld's ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos`` wrappers, its
first observation ``"\\n".join(ob.split("\\n\\n")[1:])``. Whole-split runs are marked slow.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from agentenvs.alfworld import ALFWorldEnv, data  # noqa: E402
from agentenvs.alfworld.expert import ALFWorldExpert  # noqa: E402
from agentenvs.core import SnapshotError  # noqa: E402
from agentenvs.expert import ExpertFailure, make_expert  # noqa: E402

LOOK_TASK = (
    "alfworld/valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/"
    "trial_T20190908_222917_366542"
)
COOL_TASK = "agentgym/2420"  # pick_cool_then_place_in_recep-Mug-None-CoffeeMachine-23
CLEAN_TASK = (
    "alfworld/valid_seen/pick_clean_then_place_in_recep-SoapBar-None-Toilet-428/"
    "trial_T20190907_041436_588106"
)


def _original(relative: str) -> Path | None:
    """A published file of the original benchmark under ``$AGENTENVS_ORIGINALS`` (a folder that
    some machines have; never part of the repository), or None."""
    root = os.environ.get("AGENTENVS_ORIGINALS")
    path = Path(root) / relative if root else None
    return path if path is not None and path.exists() else None


SHARED_TRAIN = _original("alfworld/train.tar.gz")  # AgentGym's ALFWorld training archive
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def env():
    e = ALFWorldEnv()
    yield e
    e.close()


class AgentGymReference:
    """AgentGym's server path: textworld.gym over one game file with alfworld's wrappers."""

    def __init__(self, game_file: str) -> None:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        env_id = textworld.gym.register_games(
            [game_file],
            infos,
            batch_size=1,
            asynchronous=False,
            max_episode_steps=100,
            wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
        )
        self.env = textworld.gym.make(env_id)

    def reset(self) -> tuple[str, list[str]]:
        obs, info = self.env.reset()
        return "\n".join(obs[0].split("\n\n")[1:]), info["admissible_commands"][0]

    def step(self, action: str) -> tuple[str, float, list[str]]:
        obs, _, _, info = self.env.step([action])
        return obs[0], float(info["won"][0]), info["admissible_commands"][0]


class RawReference:
    """The same wrapper chain without the gym layer, reloadable: for whole-split comparisons."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))

    def reset(self, game_file: str) -> tuple[str, list[str]]:
        self.env.load(game_file)
        state = self.env.reset()
        return "\n".join(state.feedback.split("\n\n")[1:]), state["admissible_commands"]

    def step(self, action: str) -> tuple[str, float, list[str]]:
        state, _, _ = self.env.step(action)
        return state.feedback, float(state["won"]), state["admissible_commands"]


def game_file(env: ALFWorldEnv, task_id: str) -> str:
    return str(data.resolve_game_file(env.game(task_id)))


def seeded_actions(env: ALFWorldEnv, task_id: str, seed: int, n: int) -> list[str]:
    """A fixed mixed sequence: admissible commands drawn from a seeded generator, and junk."""
    rng = random.Random(seed)
    env.reset(options={"task_id": task_id})
    actions = []
    for i in range(n):
        if i % 4 == 3:
            action = rng.choice(["jump", "take the mug", "go to moon 1", "", "Look"])
        else:
            action = rng.choice(env.admissible_actions())
        actions.append(action)
        env.step(action)
        if env.done:
            break
    return actions


def trace(env: ALFWorldEnv, actions: list[str]) -> list:
    out = []
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        out.append(
            [
                obs,
                reward,
                term,
                trunc,
                info["valid"],
                info["won"],
                info["turn"],
                info["admissible_actions"],
                info["fields"],
            ]
        )
        if term or trunc:
            break
    return out


_SUBPROCESS = """
import json, pickle, sys
from agentenvs.alfworld import ALFWorldEnv
job = json.load(sys.stdin)
env = ALFWorldEnv()
out = {}
for start in ("snapshot", "task_id"):
    if start == "snapshot":
        obs, info = env.restore(pickle.loads(bytes.fromhex(job["snapshot"])))
        actions = job["actions"][job["cut"]:]
    else:
        obs, info = env.reset(options={"task_id": job["task_id"]})
        actions = job["actions"]
    rows = out[start] = [[obs, info["admissible_actions"], info["turn"]]]
    for a in actions:
        obs, reward, term, trunc, info = env.step(a)
        rows.append([obs, reward, term, trunc, info["valid"], info["won"], info["turn"],
                     info["admissible_actions"], info["fields"]])
print(json.dumps(out))
"""


def run_subprocess(job: dict, hash_seed: str) -> dict:
    envvars = dict(os.environ, PYTHONHASHSEED=hash_seed)
    result = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=envvars,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


# --------------------------------------------------------------------------------------------
# Conformance with the original


def test_exact_text_of_a_known_game(env):
    obs, info = env.reset(options={"task_id": COOL_TASK})
    assert obs == (
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 10, a "
        "cabinet 9, a cabinet 8, a cabinet 7, a cabinet 6, a cabinet 5, a cabinet 4, a cabinet 3,"
        " a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 1, a diningtable 1, a drawer "
        "2, a drawer 1, a fridge 1, a garbagecan 1, a microwave 1, a sinkbasin 1, a stoveburner "
        "4, a stoveburner 3, a stoveburner 2, a stoveburner 1, and a toaster 1.\n"
        "Your task is to: cool some mug and put it in coffeemachine."
    )
    assert info["admissible_actions"][:2] == ["go to cabinet 1", "go to cabinet 10"]
    assert info["admissible_actions"][-3:] == ["help", "inventory", "look"]
    at_machine = "You arrive at coffeemachine 1. On the coffeemachine 1, you see nothing."
    expected = [
        ("go to coffeemachine 1", at_machine, 0.0),
        ("take mug 2 from countertop 1", "You pick up the mug 2 from the countertop 1.", 0.0),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.", 0.0),
        ("jump", "Nothing happens.", 0.0),
        ("cool mug 2 with fridge 1", "You cool the mug 2 using the fridge 1.", 0.0),
        ("go to coffeemachine 1", at_machine, 0.0),
        ("move mug 2 to coffeemachine 1", "You move the mug 2 to the coffeemachine 1.", 1.0),
    ]
    for action, text, reward in expected:
        obs, r, term, trunc, info = env.step(action)
        assert (obs, r) == (text, reward)
    assert term and not trunc and info["won"] and info["turn"] == 7


@pytest.mark.parametrize("task_id", [LOOK_TASK, CLEAN_TASK])
def test_same_text_as_agentgym(env, task_id):
    ref = AgentGymReference(game_file(env, task_id))
    junk = seeded_actions(env, task_id, seed=7, n=8)
    walkthrough = env.walkthrough
    for actions in (junk, walkthrough):
        obs, info = env.reset(options={"task_id": task_id})
        assert (obs, info["admissible_actions"]) == ref.reset()
        for action in actions:
            obs, reward, term, _, info = env.step(action)
            assert (obs, reward, info["admissible_actions"]) == ref.step(action), action
            if term:
                break
    assert info["won"] and term


# --------------------------------------------------------------------------------------------
# Expert


@pytest.mark.parametrize("task_id", [COOL_TASK, LOOK_TASK, CLEAN_TASK])
def test_expert_solves_from_the_start(env, task_id):
    expert = make_expert("ALFWorld-v0")
    env.reset(options={"task_id": task_id})
    steps = 0
    while not env.done:
        decision = expert.act(env)
        assert decision.thought
        env.step(decision.action)
        steps += 1
    assert env.won and steps == len(env.walkthrough) and expert.replans == 0


@pytest.mark.parametrize(
    "detour, repairs, replans",
    [
        # holding the right object elsewhere: the repaired walkthrough wins, no planner needed
        (
            [
                "go to drawer 1",
                "open drawer 1",
                "go to desk 2",
                "take alarmclock 1 from desk 2",
                "go to shelf 1",
                "inventory",
            ],
            1,
            0,
        ),
        # the object moved: the walkthrough cannot be repaired, the planner finds the way
        (
            [
                "go to desk 2",
                "take alarmclock 1 from desk 2",
                "go to shelf 1",
                "move alarmclock 1 to shelf 1",
                "go to bed 1",
            ],
            0,
            1,
        ),
    ],
)
def test_expert_recovers_after_a_restored_detour(env, detour, repairs, replans):
    expert = ALFWorldExpert()
    env.reset(options={"task_id": LOOK_TASK})
    for action in detour:
        assert env.step(action)[4]["valid"]
    snap = env.snapshot()
    fresh = ALFWorldEnv()
    fresh.restore(snap)
    while not fresh.done:
        fresh.step(expert.act(fresh).action)
    assert fresh.won and fresh.turn <= len(detour) + 5
    assert (expert.repairs, expert.replans) == (repairs, replans)
    fresh.close()


def test_expert_reports_a_dead_end(env):
    """A paper towel roll fits no receptacle of this kitchen: once taken, the game is lost."""
    env.reset(
        options={
            "task_id": "alfworld/valid_unseen/pick_clean_then_place_in_recep-Egg-None-"
            "Microwave-10/trial_T20190909_120712_273910"
        }
    )
    for action in ["go to countertop 1", "take papertowelroll 1 from countertop 1"]:
        env.step(action)
    assert not any(a.startswith("move ") for a in env.admissible_actions())
    with pytest.raises(ExpertFailure, match="dead end"):
        ALFWorldExpert().act(env)


# --------------------------------------------------------------------------------------------
# Snapshot, restore, determinism


def test_snapshot_round_trip_in_process(env):
    actions = seeded_actions(env, CLEAN_TASK, seed=3, n=10)
    env.reset(options={"task_id": CLEAN_TASK})
    trace(env, actions[:4])
    snap = pickle.loads(pickle.dumps(env.snapshot()))
    at_snapshot = (env.observation, env.admissible_actions(), env.turn)
    later = trace(env, actions[4:])
    fresh = ALFWorldEnv()
    obs, info = fresh.restore(snap)
    assert (obs, info["admissible_actions"], info["turn"]) == at_snapshot
    assert trace(fresh, actions[4:]) == later
    # Same instance: restore after going elsewhere (replay), then from an earlier state (fast path).
    env.reset(options={"task_id": COOL_TASK})
    env.restore(snap)
    assert trace(env, actions[4:]) == later
    env.reset(options={"task_id": CLEAN_TASK})
    env.restore(snap)
    assert trace(env, actions[4:]) == later
    fresh.close()


def test_restore_rejects_a_snapshot_that_does_not_replay(env):
    env.reset(options={"task_id": COOL_TASK})
    env.step("go to coffeemachine 1")
    snap = env.snapshot()
    episode, _ = pickle.loads(snap.state)
    garbled = type(snap)(snap.env_id, COOL_TASK, snap.turn, pickle.dumps((episode, 42)))
    with pytest.raises(SnapshotError, match="sequence of commands"):
        env.restore(garbled)
    state = pickle.dumps((episode, ("go to fridge 1",)))
    bad = type(snap)(snap.env_id, LOOK_TASK, snap.turn, state)
    with pytest.raises(SnapshotError, match="does not replay"):
        env.restore(bad)
    with pytest.raises(Exception, match="reset"):
        env.step("look")


def test_snapshot_across_processes_and_hash_seeds(env):
    """Restore in another process, and replay from reset under two PYTHONHASHSEED values."""
    actions = seeded_actions(env, COOL_TASK, seed=11, n=14)
    env.reset(options={"task_id": COOL_TASK})
    trace(env, actions[:5])
    snap = env.snapshot()
    expected = json.loads(json.dumps(trace(env, actions[5:])))
    job = {"snapshot": pickle.dumps(snap).hex(), "task_id": COOL_TASK, "actions": actions, "cut": 5}
    first, second = run_subprocess(job, hash_seed="1"), run_subprocess(job, hash_seed="2")
    assert first == second
    assert first["snapshot"][1:] == expected
    assert first["task_id"][6:] == expected


# --------------------------------------------------------------------------------------------
# Malformed actions, engine hazards, gymnasium


def test_fuzz_malformed_actions(env):
    rng = random.Random(0)
    env.reset(options={"task_id": COOL_TASK})
    before = env.admissible_actions()
    junk = [
        "",
        " ",
        "\n",
        "go to",
        "go to fridge",
        "GO TO FRIDGE 1",
        "go to fridge 1\nlook",
        "take mug 2 from countertop 1",
        "🙂",
        "x" * 10_000,
        "put mug in fridge",
        "\x00",
        "Action: [[ go to fridge 1 ]]",
        "go  to fridge 1",
        "look look",
    ]
    junk += [
        "".join(rng.choice("abcdefghij klm\t0123") for _ in range(rng.randint(1, 40)))
        for _ in range(8)
    ]
    for action in junk:
        obs, reward, term, trunc, info = env.step(action)
        assert (obs, reward, term, info["valid"]) == ("Nothing happens.", 0.0, False, False), action
        assert info["admissible_actions"] == before
    env.reset(options={"task_id": COOL_TASK})
    obs, _, _, _, info = env.step("  go to fridge 1 \n")  # the engine strips the command
    assert info["valid"] and obs.startswith("You arrive at fridge 1.")
    assert env.action_log == ("go to fridge 1",)


def test_truncation_and_budget(env):
    assert ALFWorldEnv.default_max_turns == 50
    short = ALFWorldEnv(max_turns=3)
    short.reset(options={"task_id": LOOK_TASK})
    results = [short.step("jump") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    short.close()


def test_missing_engine_says_how_to_install(monkeypatch):
    from agentenvs.alfworld import engine
    from agentenvs.registration import MissingDependencyError

    monkeypatch.setitem(sys.modules, "textworld.envs.pddl.pddl", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'agentenvs\[alfworld\]'"):
        engine._import_engine()


def test_engine_hazards_are_contained():
    argv = sys.argv
    had = os.environ.get("ALFWORLD_DATA")
    state = random.getstate()
    env = ALFWorldEnv()
    env.reset(options={"task_id": LOOK_TASK})
    env.step("go to desk 2")
    assert sys.argv is argv
    assert os.environ.get("ALFWORLD_DATA") == had
    assert random.getstate() == state
    env.close()
    with pytest.raises(Exception, match="reset"):
        env.step("look")


def test_reset_draws_from_reset_split(env):
    other = ALFWorldEnv(reset_split="valid_unseen")
    obs, info = other.reset(seed=5)
    assert info["task_id"].startswith("alfworld/valid_unseen/")
    assert other.reset(seed=5)[1]["task_id"] == info["task_id"]
    assert env.np_random is not None
    other.close()


@pytest.mark.slow
def test_check_env_on_a_bundled_split():
    env = ALFWorldEnv(reset_split="valid_unseen")
    check_env(env, skip_render_check=True)
    env.close()


def test_engine_plan_does_not_move_the_state(env):
    env.reset(options={"task_id": LOOK_TASK})
    env.step("go to shelf 1")
    before = (env.admissible_actions(), env.action_log)
    assert env.plan()[-1] == "use desklamp 1"
    assert (env.admissible_actions(), env.action_log) == before


# --------------------------------------------------------------------------------------------
# Training split from the original archive (where a machine has it) and whole splits (slow)


@pytest.fixture(scope="module")
def shared_train_dir(tmp_path_factory):
    """A few training games unpacked from the original archive (never copied into the repo)."""
    if SHARED_TRAIN is None:
        pytest.skip("ALFWorld's training archive is not on this machine ($AGENTENVS_ORIGINALS)")
    wanted = {
        data.GameRef("train", data.games_index()["train"][i]).relative_path() for i in (0, 1000)
    }
    wanted.add(data.agentgym_games()[0].relative_path())
    root = tmp_path_factory.mktemp("alfworld_train")
    with tarfile.open(SHARED_TRAIN, "r:gz") as tar:
        for member in tar:
            if member.name in wanted:
                target = root / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    return root


def test_training_games_from_alfworld_data(shared_train_dir):
    env = ALFWorldEnv(data_dir=shared_train_dir)
    expert = ALFWorldExpert()
    for task_id in ["agentgym/0", env.task_ids("train")[1000]]:
        env.reset(options={"task_id": task_id})
        while not env.done:
            env.step(expert.act(env).action)
        assert env.won, task_id
    env.close()


def _expert_success(split: str) -> tuple[float, Counter, Counter]:
    env, expert = ALFWorldEnv(), ALFWorldExpert()
    wins, totals = Counter(), Counter()
    for task_id in env.task_ids(split):
        env.reset(options={"task_id": task_id})
        expert.reset()
        while not env.done:
            env.step(expert.act(env).action)
        totals[env.family(task_id)] += 1
        wins[env.family(task_id)] += env.won
    env.close()
    return sum(wins.values()) / sum(totals.values()), wins, totals


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("split", ["valid_unseen", "test", "valid_seen"])
def test_expert_wins_whole_split(split):
    rate, wins, totals = _expert_success(split)
    assert rate >= 0.95, (wins, totals)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("split", ["valid_unseen", "test"])
def test_same_text_as_agentgym_whole_split(split):
    """Every game: first observation, admissible commands and the walkthrough's texts."""
    env, ref = ALFWorldEnv(), RawReference()
    for task_id in env.task_ids(split):
        obs, info = env.reset(options={"task_id": task_id})
        assert (obs, info["admissible_actions"]) == ref.reset(game_file(env, task_id)), task_id
        for action in env.walkthrough:
            obs, reward, _, _, info = env.step(action)
            assert (obs, reward, info["admissible_actions"]) == ref.step(action), task_id
        assert info["won"], task_id
    env.close()
