"""ALFWorld-v0's tasks, splits and families, the shipped game index and data errors, and the
structured fields and matching of its observations."""

from __future__ import annotations

import gzip
import json
import tarfile
from collections import Counter

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

from agentenvs.alfworld import ALFWorldDataError, ALFWorldEnv, data  # noqa: E402
from agentenvs.alfworld.observation import parse_fields, parse_list  # noqa: E402
from agentenvs.core import MatchStatus, UnknownSplitError, UnknownTaskError  # noqa: E402

LOOK_TASK = (
    "alfworld/valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/"
    "trial_T20190908_222917_366542"
)
COOL_TASK = "agentgym/2420"  # pick_cool_then_place_in_recep-Mug-None-CoffeeMachine-23


@pytest.fixture(scope="module")
def env():
    e = ALFWorldEnv()
    yield e
    e.close()


# --------------------------------------------------------------------------------------------
# Tasks, splits, families


def test_splits_and_families(env):
    sizes = {split: len(env.task_ids(split)) for split in env.splits}
    assert sizes == {
        "train": 3553,
        "test": 200,
        "valid_seen": 140,
        "valid_unseen": 134,
        "agentgym_train": 2181,
    }
    assert env.task_ids("test")[::199] == ["agentgym/2420", "agentgym/2619"]
    # Prefix-GRPO's 200-game test set by family (Simple 46, Clean 37, Two-Obj 45, Cool 28, ...).
    assert Counter(env.family(t) for t in env.task_ids("test")) == {
        "pick_and_place_simple": 46,
        "pick_clean_then_place_in_recep": 37,
        "pick_two_obj_and_place": 45,
        "pick_cool_then_place_in_recep": 28,
        "pick_heat_then_place_in_recep": 25,
        "look_at_obj_in_light": 19,
    }
    assert {env.family(t) for t in env.task_ids("valid_unseen")} == set(data.TASK_TYPES)
    assert env.family(COOL_TASK) == "pick_cool_then_place_in_recep"
    with pytest.raises(UnknownSplitError, match="valid splits"):
        env.task_ids("validation")


@pytest.mark.parametrize(
    "bad",
    [
        "agentgym/2620",
        "agentgym/-1",
        "agentgym/01",
        "alfworld/valid_seen/nope/trial_1",
        "alfworld/valid/x/y",
        "textcraft/1",
        "",
        "alfworld/valid_seen",
    ],
)
def test_unknown_task_ids(env, bad):
    with pytest.raises(UnknownTaskError, match="valid forms"):
        env.reset(options={"task_id": bad})


def test_shipped_index_matches_archives():
    index = data.games_index()
    for split in data.SHIPPED_SPLITS:
        with tarfile.open(data.DATA_DIR / f"{split}.tar.gz") as tar:
            keys = sorted(
                m.name.split("/", 2)[2].rsplit("/", 1)[0]
                for m in tar.getmembers()
                if m.name.endswith(data.GAME_FILE)
            )
        assert keys == list(index[split])
    with gzip.open(data.DATA_DIR / "agentgym_mappings_test.json.gz", "rt") as f:
        rows = json.load(f)
    assert [r["item_id"] for r in rows] == list(data.AGENTGYM_TEST_IDS)
    assert all(f"{r['task_type']}/{r['task_id']}" in index["valid_train"] for r in rows)


def test_missing_training_data_says_how_to_get_it(tmp_path):
    env = ALFWorldEnv(data_dir=tmp_path)
    train_id = env.task_ids("train")[0]
    with pytest.raises(ALFWorldDataError, match="alfworld-download"):
        env.reset(options={"task_id": train_id})
    with pytest.raises(ALFWorldDataError, match="agentgym_train"):
        env.reset(options={"task_id": "agentgym/103"})  # not in alfworld's 2.1.1 release
    with pytest.raises(UnknownSplitError):
        ALFWorldEnv(reset_split="nope")


def test_shipped_split_unpacks_into_the_cache_dir(tmp_path):
    env = ALFWorldEnv(cache_dir=tmp_path)
    obs, _ = env.reset(options={"task_id": LOOK_TASK})
    assert obs.startswith("You are in the middle of a room.")
    unpacked = [p.name.split("-")[0] for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert unpacked == ["valid_unseen"]  # (and the split's lock file)
    env.close()


# --------------------------------------------------------------------------------------------
# Fields and match


def test_fields():
    assert parse_list("a bed 1, a desk 2, and a shelf 1") == ["bed 1", "desk 2", "shelf 1"]
    assert parse_list("a mug 1 and a cup 2") == ["mug 1", "cup 2"]
    assert parse_list("nothing") == []
    assert parse_fields("You arrive at drawer 5. The drawer 5 is closed.") == {
        "location": "drawer 5",
        "states": {"drawer 5": ["closed"]},
    }
    assert parse_fields("You open the drawer 5. The drawer 5 is open. In it, you see a pen 1.") == {
        "seen": ["pen 1"],
        "states": {"drawer 5": ["open"]},
    }
    assert parse_fields("You are carrying: a mug 2.") == {"inventory": ["mug 2"]}
    assert parse_fields("You move the mug 2 to the shelf 1.") == {"inventory": []}
    assert parse_fields("You turn on the desklamp 1.") == {"states": {"desklamp 1": ["on"]}}
    assert parse_fields("This is a hot and clean sliced apple 1.") == {
        "states": {"apple 1": ["hot", "clean", "sliced"]}
    }
    assert parse_fields("You heat the egg 1 using the microwave 1.") == {
        "states": {"egg 1": ["hot"]}
    }
    assert parse_fields("Nothing happens.") == {}


def test_match(env):
    a = "You arrive at desk 1. On the desk 1, you see a mug 1."
    assert env.match(a, a.replace(" On", "\n On")).status is MatchStatus.MATCH
    result = env.match(a, "You arrive at desk 1. On the desk 1, you see nothing.")
    assert result.status is MatchStatus.MISMATCH
    assert set(result.differing) == {"text", "seen"} and "location" not in result.differing
