"""The uniform text-environment API every agentenvs environment implements.

One base class, :class:`TextEnv`, turns five benchmarks into the same Gymnasium contract
(docs/architecture.md, "The environment contract"):

* text observation in, text action out (``gymnasium.Env[str, str]``);
* ``reset(seed=s)`` draws a training task, ``reset(options={"task_id": id})`` loads one;
* the same ``info`` keys on reset and every step: ``task_id``, ``family``, ``won``, ``valid``,
  ``turn``, ``admissible_actions``, ``fields``;
* an environment-owned turn budget (``max_turns``) that sets ``truncated``;
* :meth:`TextEnv.snapshot` / :meth:`TextEnv.restore` of the whole episode state as a picklable
  :class:`Snapshot`, and :meth:`TextEnv.replay` of an action prefix;
* :meth:`TextEnv.fields` and :meth:`TextEnv.match` for structured comparison of observations.

A subclass supplies the benchmark: its tasks (:meth:`task_ids`, :meth:`family`), how a task starts
(:meth:`_start_task`), how an action changes the state (:meth:`_apply`), and how to capture and put
back its state (:meth:`_get_state`, :meth:`_set_state`). Everything else lives here, once.
"""

from __future__ import annotations

import enum
import pickle
import re
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym

from agentenvs.spaces import TextSpace

__all__ = [
    "SNAPSHOT_VERSION",
    "EpisodeOverError",
    "MatchResult",
    "MatchStatus",
    "Outcome",
    "ReplayResult",
    "ResetNeededError",
    "Snapshot",
    "SnapshotError",
    "StepResult",
    "TextEnv",
    "TextSpace",
    "UnknownSplitError",
    "UnknownTaskError",
    "match_fields",
    "match_text",
    "normalize_whitespace",
    "shorten",
]

SNAPSHOT_VERSION = 1

# --------------------------------------------------------------------------------------------
# Errors: typed, and each says how to fix the problem.


class UnknownTaskError(ValueError):
    """A task id that the environment does not know; the message lists the valid forms."""


class UnknownSplitError(ValueError):
    """A split name that the environment does not have; the message lists the valid splits."""


class ResetNeededError(RuntimeError):
    """``step``, ``snapshot`` or ``admissible_actions`` was called before ``reset``."""


class EpisodeOverError(RuntimeError):
    """``step`` was called after the episode terminated or was truncated; call ``reset``."""


class SnapshotError(ValueError):
    """A snapshot that cannot be restored here (another environment id, or a newer format)."""


# --------------------------------------------------------------------------------------------
# Spaces: TextSpace lives in agentenvs.spaces (with its shared-memory form) and is re-exported.


# --------------------------------------------------------------------------------------------
# Records


class Outcome(NamedTuple):
    """What one action did, as a subclass's :meth:`TextEnv._apply` reports it.

    ``consumes_turn`` is False where the benchmark does not count an invalid action against the
    budget (Sokoban); the base class does the counting and sets ``truncated``.
    """

    observation: str
    reward: float = 0.0
    valid: bool = True
    won: bool = False
    terminated: bool = False
    consumes_turn: bool = True


class StepResult(NamedTuple):
    """Gymnasium's step 5-tuple with names."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclass(frozen=True)
class ReplayResult:
    """What :meth:`TextEnv.replay` returns: the reset and every step after it, in order."""

    task_id: str
    observation: str
    info: dict[str, Any]
    steps: tuple[StepResult, ...]

    @property
    def observations(self) -> list[str]:
        """The reset observation followed by every step's observation."""
        return [self.observation] + [s.observation for s in self.steps]

    @property
    def last_observation(self) -> str:
        return self.steps[-1].observation if self.steps else self.observation


@dataclass(frozen=True)
class Snapshot:
    """The whole state of one episode, immutable and picklable.

    ``state`` is the pickled state bytes (the base class's episode counters plus the subclass's
    benchmark state), so a snapshot crosses processes as it is. Restore it with
    :meth:`TextEnv.restore` on any instance of the same ``env_id``.
    """

    env_id: str
    task_id: str
    turn: int
    state: bytes
    version: int = SNAPSHOT_VERSION

    def to_bytes(self) -> bytes:
        """A self-contained byte form (for files or queues); :meth:`from_bytes` reads it back."""
        return pickle.dumps(
            (self.version, self.env_id, self.task_id, self.turn, self.state),
            protocol=pickle.HIGHEST_PROTOCOL,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Snapshot:
        try:
            version, env_id, task_id, turn, state = pickle.loads(data)
        except Exception as exc:  # corrupt input is a clear error, not a crash deep inside
            raise SnapshotError(f"not a snapshot: {exc}") from exc
        return cls(env_id=env_id, task_id=task_id, turn=turn, state=state, version=version)


class MatchStatus(str, enum.Enum):
    """How two observations compare on their structured fields."""

    MATCH = "match"
    MISMATCH = "mismatch"
    UNVERIFIABLE = "unverifiable"


@dataclass(frozen=True)
class MatchResult:
    """The result of :meth:`TextEnv.match`.

    ``shared`` lists the fields both observations have; ``differing`` maps each shared field
    whose values differ to ``(expected, actual)``.
    """

    status: MatchStatus
    shared: tuple[str, ...] = ()
    differing: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.status is MatchStatus.MATCH


_WHITESPACE = re.compile(r"\s+")


def normalize_whitespace(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return _WHITESPACE.sub(" ", text).strip()


def shorten(text: str, limit: int) -> str:
    """``text`` itself when at most ``limit`` characters, else its first ``limit`` characters
    and a note of how many were cut (for echoing an over-long action into an observation)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def match_fields(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> MatchResult:
    """Compare two field dicts on the keys they share (no shared key: unverifiable)."""
    shared = tuple(k for k in expected if k in actual)
    if not shared:
        return MatchResult(MatchStatus.UNVERIFIABLE)
    differing = {k: (expected[k], actual[k]) for k in shared if expected[k] != actual[k]}
    status = MatchStatus.MISMATCH if differing else MatchStatus.MATCH
    return MatchResult(status, shared, differing)


def match_text(expected: str, actual: str) -> MatchResult:
    """Exact comparison after whitespace normalisation, reported as the field ``text``."""
    e, a = normalize_whitespace(expected), normalize_whitespace(actual)
    if e == a:
        return MatchResult(MatchStatus.MATCH, ("text",))
    return MatchResult(MatchStatus.MISMATCH, ("text",), {"text": (e, a)})


# --------------------------------------------------------------------------------------------
# The base class


class TextEnv(gym.Env[str, str]):
    """Base class of every agentenvs environment; see the module docstring for the contract.

    Subclasses set the class attributes ``env_id``, ``splits``, ``default_max_turns`` and
    ``task_id_forms`` (human-readable forms for error messages, e.g. ``"adapt/<0-199>"``), and
    implement the abstract methods below.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    env_id: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    default_max_turns: ClassVar[int] = 30
    task_id_forms: ClassVar[tuple[str, ...]] = ()
    max_observation_length: ClassVar[int] = 100_000
    max_action_length: ClassVar[int] = 10_000

    def __init__(self, max_turns: int | None = None, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode {render_mode!r} is not supported; choose one of "
                f"{self.metadata['render_modes']} or None"
            )
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.render_mode = render_mode
        self.max_turns = max_turns if max_turns is not None else self.default_max_turns
        self.observation_space = TextSpace(self.max_observation_length)
        self.action_space = TextSpace(self.max_action_length)
        self._task_id: str | None = None
        self._turn = 0
        self._won = False
        self._terminated = False
        self._truncated = False
        self._observation = ""

    # ----- what a subclass provides ---------------------------------------------------------

    @abstractmethod
    def task_ids(self, split: str) -> list[str]:
        """The task ids of ``split`` in a fixed order (raise via :meth:`_unknown_split`)."""

    @abstractmethod
    def family(self, task_id: str) -> str:
        """The task family used in reports (e.g. ``depth-2``)."""

    @abstractmethod
    def _start_task(self, task_id: str) -> str:
        """Set up ``task_id`` from scratch and return the first observation.

        Raise :class:`UnknownTaskError` (via :meth:`_unknown_task`) for an id it does not know.
        """

    @abstractmethod
    def _apply(self, action: str) -> Outcome:
        """Apply one action to the current state. Never raises for a bad action string."""

    @abstractmethod
    def _get_state(self) -> Any:
        """The benchmark state of the current episode, as a picklable value."""

    @abstractmethod
    def _set_state(self, task_id: str, state: Any) -> None:
        """Put back a state from :meth:`_get_state`; may be called on a fresh instance."""

    def _admissible_actions(self) -> list[str] | None:
        """The actions the benchmark lists as valid now, or None where it lists none."""
        return None

    def fields(self, observation: str) -> dict[str, Any]:
        """The structured fields of an observation (none by default)."""
        return {}

    def match(self, expected: str, actual: str) -> MatchResult:
        """Compare two observations on their shared fields.

        The default compares :meth:`fields`; an environment without fields compares the whole
        text after whitespace normalisation (override to change).
        """
        fe, fa = self.fields(expected), self.fields(actual)
        if not fe and not fa:
            return match_text(expected, actual)
        return match_fields(fe, fa)

    def _draw_train_task(self) -> str:
        """A training task drawn with ``self.np_random`` (what ``reset(seed=s)`` starts).

        Override where listing the training split is costly (e.g. 65,536 Sokoban seeds)."""
        train = self.task_ids("train")
        return train[int(self.np_random.integers(len(train)))]

    def _extra_info(self) -> dict[str, Any]:
        """Benchmark-specific info keys added to the contract's keys (e.g. BabyAI's level)."""
        return {}

    @property
    def variant(self) -> dict[str, Any]:
        """The outcome-changing settings this instance runs with, as JSON-ready values.

        Every keyword that changes scores against the original benchmark (a bug fix that is
        opt-in, a game version) appears here with its current value, so trajectories and result
        tables can record which variant ran (``{}``: the environment has no such setting).
        """
        return {}

    # ----- the Gymnasium API -------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start a task: ``options["task_id"]`` if given, else a training task drawn from
        ``seed``."""
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise ValueError(
                f"unknown reset options {sorted(options)}; the only option is 'task_id'"
            )
        if task_id is None:
            task_id = self._draw_train_task()
        elif not isinstance(task_id, str):
            raise UnknownTaskError(f"task_id must be a string, got {type(task_id).__name__}")
        self._observation = self._start_task(task_id)
        self._task_id = task_id
        self._turn = 0
        self._won = False
        self._terminated = False
        self._truncated = False
        return self._observation, self._info(valid=True)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one action; a malformed or illegal one is an observation, never an exception."""
        if self._task_id is None:
            raise ResetNeededError("call reset() before step()")
        if self._terminated or self._truncated:
            raise EpisodeOverError(
                f"the episode of {self._task_id} is over (turn {self._turn}); call reset()"
            )
        if not isinstance(action, str):
            raise TypeError(f"an action is a str, got {type(action).__name__}")
        observation, reward, valid, won, terminated, consumes_turn = self._apply(action)
        if len(observation) > self.max_observation_length:  # stay in observation_space
            observation = shorten(observation, self.max_observation_length - 40)
        if consumes_turn:
            self._turn += 1
        self._won = self._won or won
        self._terminated = terminated
        self._truncated = truncated = not terminated and self._turn >= self.max_turns
        self._observation = observation
        return observation, float(reward), terminated, truncated, self._info(valid)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._observation
        return None

    # ----- snapshot, restore, replay -------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The whole episode state as an immutable, picklable :class:`Snapshot`."""
        if self._task_id is None:
            raise ResetNeededError("call reset() before snapshot()")
        episode = (self._turn, self._won, self._terminated, self._truncated, self._observation)
        state = pickle.dumps((episode, self._get_state()), protocol=pickle.HIGHEST_PROTOCOL)
        return Snapshot(self.env_id, self._task_id, self._turn, state)

    def restore(self, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        """Make this instance continue exactly from ``snapshot``; returns (observation, info)."""
        if not isinstance(snapshot, Snapshot):
            raise SnapshotError(f"expected a Snapshot, got {type(snapshot).__name__}")
        if snapshot.env_id != self.env_id:
            raise SnapshotError(
                f"a snapshot of {snapshot.env_id} cannot be restored into {self.env_id}"
            )
        if snapshot.version > SNAPSHOT_VERSION:
            raise SnapshotError(
                f"snapshot format {snapshot.version} is newer than this agentenvs "
                f"(reads up to {SNAPSHOT_VERSION}); upgrade agentenvs"
            )
        episode, state = pickle.loads(snapshot.state)
        self._set_state(snapshot.task_id, state)
        self._task_id = snapshot.task_id
        self._turn, self._won, self._terminated, self._truncated, self._observation = episode
        return self._observation, self._info(valid=True)

    def replay(self, task_id: str, actions: Sequence[str]) -> ReplayResult:
        """Reset to ``task_id`` and apply ``actions`` in order, returning every result.

        Raises :class:`EpisodeOverError` if the episode ends before the last action.
        """
        observation, info = self.reset(options={"task_id": task_id})
        steps = []
        for i, action in enumerate(actions):
            if self._terminated or self._truncated:
                raise EpisodeOverError(
                    f"replay of {task_id}: the episode ended after {i} of {len(actions)} actions"
                )
            steps.append(StepResult(*self.step(action)))
        return ReplayResult(task_id, observation, info, tuple(steps))

    # ----- state read-outs -----------------------------------------------------------------

    @property
    def task_id(self) -> str | None:
        """The current task id (None before the first reset)."""
        return self._task_id

    @property
    def turn(self) -> int:
        return self._turn

    @property
    def won(self) -> bool:
        return self._won

    @property
    def done(self) -> bool:
        """True once the episode terminated or was truncated."""
        return self._terminated or self._truncated

    @property
    def observation(self) -> str:
        """The latest observation."""
        return self._observation

    def admissible_actions(self) -> list[str] | None:
        """The benchmark's list of valid actions now, or None where it has none."""
        if self._task_id is None:
            raise ResetNeededError("call reset() before admissible_actions()")
        return self._admissible_actions()

    def all_task_ids(self) -> list[str]:
        """Every task id of every split, each once, in split order."""
        seen: dict[str, None] = {}
        for split in self.splits:
            seen.update(dict.fromkeys(self.task_ids(split)))
        return list(seen)

    # ----- helpers for subclasses --------------------------------------------------------

    def _info(self, valid: bool) -> dict[str, Any]:
        task_id = self._task_id
        assert task_id is not None
        info = {
            "task_id": task_id,
            "family": self.family(task_id),
            "won": self._won,
            "valid": valid,
            "turn": self._turn,
            "admissible_actions": self._admissible_actions(),
            "fields": self.fields(self._observation),
        }
        extra = self._extra_info()
        if extra:
            info.update(extra)
        return info

    def _echo(self, text: str) -> str:
        """``text`` (part of an action) as an observation may quote it: unchanged up to
        ``max_action_length`` characters (every action inside ``action_space``), shortened
        beyond, so the observation stays inside ``observation_space``."""
        return shorten(text, self.max_action_length)

    def _unknown_task(self, task_id: str, reason: str = "") -> UnknownTaskError:
        forms = ", ".join(self.task_id_forms) or "see task_ids(split)"
        why = f" ({reason})" if reason else ""
        return UnknownTaskError(
            f"{self.env_id}: unknown task id {task_id!r}{why}; valid forms: {forms}"
        )

    def _unknown_split(self, split: str) -> UnknownSplitError:
        hint = ""
        close = [s for s in self.splits if s.startswith(split[:2])] if split else []
        if close:
            hint = f" Did you mean {close[0]!r}?"
        return UnknownSplitError(
            f"{self.env_id}: unknown split {split!r}; valid splits: {list(self.splits)}.{hint}"
        )
