"""ALFWorld-v0: alfworld's household text games on the real engine, offline, with its splits."""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar

from agentenvs.alfworld import data, versions
from agentenvs.alfworld.engine import Engine, import_engine
from agentenvs.alfworld.observation import first_observation, parse_fields
from agentenvs.alfworld.restore import MEMO
from agentenvs.alfworld.versions import DEFAULT_GAME_VERSION, GameVersion
from agentenvs.core import (
    MatchResult,
    MatchStatus,
    Outcome,
    ResetNeededError,
    SnapshotError,
    TextEnv,
    match_fields,
    match_text,
)

__all__ = ["DEFAULT_MAX_TURNS", "SPLITS", "ALFWorldEnv"]

DEFAULT_MAX_TURNS = 50  # ALFWorld's evaluation budget (training configs use 20)
SPLITS = ("train", "test", "valid_seen", "valid_unseen", "agentgym_train")

_ALFWORLD_ID = re.compile(r"alfworld/(?P<split>[a-z_]+)/(?P<folder>[^/]+)/(?P<trial>[^/]+)")
_AGENTGYM_ID = re.compile(r"agentgym/(?P<item>0|[1-9][0-9]{0,5})")


class ALFWorldEnv(TextEnv):
    """Do a household task (find, take, heat, cool, clean, examine, put) in a text-only house.

    ## Description
    ALFWorld's TextWorld games (Shridhar et al. 2021), played on the real engine: textworld
    1.7's PDDL environment with alfworld 0.4.2's ``AlfredDemangler`` and ``AlfredInfos`` wrappers,
    one game file (``game.tw-pddl``) per task. All four splits ship inside the package (the
    training games are read from ``$ALFWORLD_DATA`` instead when set). Two game versions
    (:mod:`agentenvs.alfworld.versions`): ``alfworld-0.4`` (the default: the shipped files as they
    are) and ``agentgym`` (the same games as AgentGym's server plays them: alfworld 0.3.3's
    grammar and rules, observations after AgentGym's ``process_ob``).

    ## Action Space
    A command string from the engine's grammar, e.g. ``go to desk 2``, ``take mug 1 from desk 2``,
    ``move mug 1 to shelf 1``, ``open fridge 1``, ``heat egg 1 with microwave 1``,
    ``use desklamp 1``, ``examine desk 2``, ``look``, ``inventory``, ``help``; under
    ``game_version="agentgym"`` the put-down is ``put mug 1 in/on shelf 1`` and there is no
    ``help`` (neither version has a ``toggle`` command). Anything that is
    not one of the admissible commands (after stripping surrounding whitespace; case matters)
    changes nothing: the observation is the engine's ``Nothing happens.`` and
    ``info["valid"]`` is False. Every action consumes a turn.

    ## Observation Space
    The engine's feedback text. The first observation is the room description and the task,
    AgentGym's form of the engine's intro (the ``-= Welcome to TextWorld, ALFRED! =-`` banner
    dropped): ``You are in the middle of a room. ... you see a bed 1, ...\\nYour task is to: ...``.
    A ``go to`` says ``You arrive at desk 2. On the desk 2, ...`` under ``alfworld-0.4``; under
    ``agentgym`` the engine's ``You arrive at loc 12.`` is removed (``On the desk 2, ...``).

    ## Starting State
    The game's initial state. ``reset(options={"task_id": id})`` loads a task;
    ``reset(seed=s)`` draws one from ``reset_split`` (default ``train``).

    ## Rewards
    ``reward_scale`` (default 1; verl-agent uses 10) on the step that wins, 0 otherwise.

    ## Episode End
    Terminated when the engine reports ``won``; truncated after ``max_turns`` actions.

    ## Information
    - ``task_id`` (str), ``family`` (str: one of the six task types, e.g.
      ``pick_two_obj_and_place``), ``won`` (bool, the engine's), ``valid`` (bool), ``turn`` (int),
    - ``admissible_actions`` (list[str]): the engine's sorted command list,
    - ``fields`` (dict): ``task``, ``location``, ``seen``, ``inventory``, ``states`` where the
      observation states them (:mod:`agentenvs.alfworld.observation`).

    ## Arguments
    - ``max_turns`` (int): turn budget, default 50 (the evaluation setting; training uses 20).
    - ``reward_scale`` (float): reward for winning, default 1.0.
    - ``reset_split`` (str): the split ``reset(seed=s)`` draws from, default ``train``.
    - ``data_dir`` (path): holds ``json_2.1.1/train`` to read the training games from; default
      ``$ALFWORLD_DATA`` if set, else the shipped training games.
    - ``cache_dir`` (path): where the shipped splits are unpacked; default
      ``$AGENTENVS_CACHE/alfworld`` or ``$XDG_CACHE_HOME/agentenvs/alfworld`` or
      ``~/.cache/agentenvs/alfworld``.
    - ``game_version`` (str): ``"alfworld-0.4"`` (default) or ``"agentgym"``; recorded in
      :attr:`variant`. A snapshot restores only into an environment of the same version.
    - ``render_mode`` (str | None): ``"ansi"`` returns the observation.

    ## Version History
    - v0: initial version (alfworld 0.4.2, textworld 1.7.0, games json_2.1.1);
      ``game_version="agentgym"`` added (alfworld 0.3.3's games rebuilt from the same files).
    """

    env_id: ClassVar[str] = "ALFWorld-v0"
    splits: ClassVar[tuple[str, ...]] = SPLITS
    default_max_turns: ClassVar[int] = DEFAULT_MAX_TURNS
    task_id_forms: ClassVar[tuple[str, ...]] = (
        "alfworld/<train|valid_seen|valid_unseen|valid_train>/<task folder>/<trial>",
        "agentgym/<0-2619>",
    )

    def __init__(
        self,
        max_turns: int | None = None,
        render_mode: str | None = None,
        *,
        reward_scale: float = 1.0,
        reset_split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        game_version: str = DEFAULT_GAME_VERSION,
    ) -> None:
        import_engine()  # a missing engine fails here, at gym.make, naming the extra to install
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if reset_split not in self.splits:
            raise self._unknown_split(reset_split)
        self._version: GameVersion = versions.game_version(game_version)
        self.reward_scale = float(reward_scale)
        self.reset_split = reset_split
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self._engine: Engine | None = None
        self._actions: list[str] = []

    # ----- tasks ------------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        if split == "test":
            return [f"agentgym/{i}" for i in data.AGENTGYM_TEST_IDS]
        if split == "agentgym_train":
            train = set(data.games_index()["train"])
            games = data.agentgym_games()
            return [
                f"agentgym/{i}"
                for i in sorted(games)
                if games[i].split == "train" and games[i].key in train
            ]
        if split in ("train", "valid_seen", "valid_unseen"):
            return [f"alfworld/{split}/{key}" for key in data.games_index()[split]]
        raise self._unknown_split(split)

    def family(self, task_id: str) -> str:
        return self.game(task_id).family

    def game(self, task_id: str) -> data.GameRef:
        """The game behind a task id (raises :class:`~agentenvs.core.UnknownTaskError`)."""
        if not isinstance(task_id, str):
            raise self._unknown_task(repr(task_id), "a task id is a string")
        if m := _AGENTGYM_ID.fullmatch(task_id):
            game = data.agentgym_games().get(int(m["item"]))
            if game is None:
                raise self._unknown_task(task_id, "AgentGym item ids run from 0 to 2619")
            return game
        if m := _ALFWORLD_ID.fullmatch(task_id):
            split, key = m["split"], f"{m['folder']}/{m['trial']}"
            index = data.games_index()
            if split not in index:
                raise self._unknown_task(task_id, f"alfworld splits are {sorted(index)}")
            if key not in _key_set(split):
                raise self._unknown_task(task_id, f"no such game in alfworld's {split} split")
            return data.GameRef(split, key)
        raise self._unknown_task(task_id)

    # ----- the TextEnv hooks ---------------------------------------------------------------------

    def _draw_train_task(self) -> str:
        """``reset(seed=s)`` draws from ``reset_split`` (default ``train``)."""
        ids = self.task_ids(self.reset_split)
        return ids[int(self.np_random.integers(len(ids)))]

    def _start_task(self, task_id: str) -> str:
        self._task_id = None  # until the new game is up, nothing may step the old one
        game = self.game(task_id)
        if game.split == "train" and game.key not in _key_set("train"):
            raise data.ALFWorldDataError(
                f"{task_id} maps to {game.relative_path()}, which alfworld's json_2.1.1 release "
                f"does not have (239 of AgentGym's 2,420 training ids are missing from it); "
                f"task_ids('agentgym_train') lists the 2,181 that exist"
            )
        path = data.resolve_game_file(game, data_dir=self.data_dir, cache_dir=self.cache_dir)
        engine = self._get_engine()
        engine.load(str(path))
        self._actions = []
        return first_observation(MEMO.reset(engine))

    def _apply(self, action: str) -> Outcome:
        engine = self._require_engine()
        feedback, valid = MEMO.step(engine, self._actions, action)  # texts seen before: memo
        if valid:
            self._actions.append(action.strip())
        won = engine.won
        observation = self._version.process_ob(feedback)
        return Outcome(observation, self.reward_scale if won else 0.0, valid, won, terminated=won)

    def _admissible_actions(self) -> list[str]:
        return self._require_engine().admissible_commands

    def _get_state(self) -> tuple[str, tuple[str, ...]]:
        # The game version and the valid commands since reset: replaying them from reset
        # rebuilds the engine's state exactly (an invalid command changes nothing in the engine).
        return (self._version.name, tuple(self._actions))

    def _set_state(self, task_id: str, state: Any) -> None:
        actions = self._snapshot_actions(state)
        ready = self._engine is not None and self._engine.ready and self._task_id == task_id
        extends = ready and actions[: len(self._actions)] == self._actions
        if extends:
            todo = actions[len(self._actions) :]  # fast path: the snapshot extends our state
        else:
            self._start_task(task_id)
            todo = actions
        self._task_id = None  # half-restored until every action replays
        engine = self._require_engine()
        for action in todo:  # the texts of states seen before come from the memo
            _, valid = MEMO.step(engine, self._actions, action)
            if not valid:
                raise SnapshotError(
                    f"snapshot of {task_id} does not replay: {action!r} is not admissible "
                    f"(different game files?)"
                )
            self._actions.append(action)

    def _snapshot_actions(self, state: Any) -> list[str]:
        """The commands of a snapshot's state, after checking it is of this game version.

        A plain sequence of commands (the state before game versions existed) is an
        ``alfworld-0.4`` state."""
        version = versions.ALFWORLD_04
        if (
            isinstance(state, tuple)
            and len(state) == 2
            and isinstance(state[0], str)
            and isinstance(state[1], tuple)
        ):
            version, state = state
        if not isinstance(state, (tuple, list)) or not all(isinstance(a, str) for a in state):
            raise SnapshotError(f"not an ALFWorld-v0 state (a sequence of commands): {state!r:.80}")
        if version != self._version.name:
            raise SnapshotError(
                f"a snapshot of ALFWorld-v0 with game_version={version!r} cannot be restored "
                f"into one with game_version={self._version.name!r}; make the environment with "
                f"game_version={version!r}"
            )
        return list(state)

    def fields(self, observation: str) -> dict[str, Any]:
        return parse_fields(observation)

    def match(self, expected: str, actual: str) -> MatchResult:
        """Exact match after whitespace normalisation (Prefix-GRPO's ALFWorld rule); a mismatch
        also lists the parsed fields that differ."""
        text = match_text(expected, actual)
        if text:
            return text
        by_field = match_fields(self.fields(expected), self.fields(actual))
        shared = ("text", *by_field.shared)
        return MatchResult(MatchStatus.MISMATCH, shared, {**text.differing, **by_field.differing})

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._task_id = None
        super().close()

    # ----- the game version -------------------------------------------------------------------

    @property
    def game_version(self) -> str:
        """The game version this instance plays (``alfworld-0.4`` or ``agentgym``)."""
        return self._version.name

    @property
    def version(self) -> GameVersion:
        """The game version's record (its put-down command form, observation transform)."""
        return self._version

    @property
    def variant(self) -> dict[str, Any]:
        return {"game_version": self._version.name}

    # ----- for experts and tools -------------------------------------------------------------

    @property
    def action_log(self) -> tuple[str, ...]:
        """The valid commands applied since reset, in order (what a snapshot replays)."""
        return tuple(self._actions)

    @property
    def walkthrough(self) -> list[str]:
        """The current game's stored reference solution, from its initial state."""
        return self._require_engine().walkthrough

    def plan(self) -> list[str]:
        """The planner's command sequence from the current state to the goal ([] if none)."""
        return self._require_engine().plan()

    # ----- private ---------------------------------------------------------------------------

    def _get_engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(transform=self._version.transform)
        return self._engine

    def _require_engine(self) -> Engine:
        if self._engine is None or not self._engine.ready:
            raise ResetNeededError("call reset() first")
        return self._engine


def _key_set(split: str) -> frozenset[str]:
    return _KEY_SETS.setdefault(split, frozenset(data.games_index()[split]))


_KEY_SETS: dict[str, frozenset[str]] = {}
