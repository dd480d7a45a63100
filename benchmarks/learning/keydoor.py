"""KeyDoor-v0: the learning benchmark's credit testbed, a key-and-door task in a row of rooms.

Built the way credit assignment is tested (key-to-door tasks): the first action decides the
outcome many turns later, and the reward is sparse and terminal.

* The hall (room 0) has a sign naming the door's colour and 2 or 3 keys of different colours
  (listed in random order). Taking a key is final: the other keys crumble.
* Rooms 1 .. L-1 lead east to the door room L (L = 4..8); some have a dead-end alcove to the
  north or south. Observations are one or two short lines and name only the room, the key held
  and the exits, so states recur across episodes (anchor groups form); the sign is shown in
  the hall only.
* ``open door`` in the door room ends the episode: reward 1 with the sign's key (won), 0 with
  another. Every other step's reward is 0; the turn limit is :data:`MAX_TURNS` (20).
* Held-out layouts and symbol permutations: training tasks (``layout/<n>``, n < 2**16) never
  pair the door's colour with a distractor of :data:`HELD_OUT_PAIRS`; test tasks
  (``layout/<n>``, n = 2**16 .. 2**16 + 199) and validation tasks (the next 200 seeds: settings
  are chosen on them) always do. Every colour is a door and a distractor in training, so only
  reading the sign carries over.

Every step's info has ``step_credit`` (the oracle arm's): ``L(s) - L(s') - 1`` (minus the turns
the action added to the shortest possible episode) with ``L`` the length of a shortest winning
action sequence (:func:`shortest_length`, 0 once won): 0 for a move of a shortest plan, -1 for a
wasted turn, -2 for a step away; taking a wrong key is
:data:`agentenvs.benchmarks.learning.envs.FATAL_CREDIT`; 0 once the episode cannot be won.
``solvable`` says whether the episode could still be won before the step's action.

``KeyDoor-traps-v0`` (:class:`KeyDoorTrapsEnv`) is the same task with trap forks: each room
1 .. L-1 is, with chance :data:`FORK_CHANCE`, a fork with two ways on, east and north or south,
one of them marked ``(trap)`` in the observation (``Exits: west, north (trap), east.``). The
other leads to the next room; the trap ends the episode with reward 0, and entering it is fatal
(:data:`~agentenvs.benchmarks.learning.envs.FATAL_CREDIT`). A loss then no longer says which
decision lost it (the key or a fork), while the step credit does; the layouts' keys, doors,
rooms and alcoves are KeyDoor-v0's wherever a room is not a fork.

``KeyDoor-hidden-traps-v0`` (:class:`KeyDoorHiddenTrapsEnv`) has forks with chance
:data:`HIDDEN_FORK_CHANCE` and does not mark the trap: a fork reads like an alcove room
(``Exits: west, north, east.``), so on an unseen layout a policy can only guess, and the outcome
after the sign's key depends on later guesses the key did not cause. The expert knows the layout.

All three are registered in the process that runs the learning benchmark
(:mod:`agentenvs.benchmarks.learning.plugins`), not in the package's list of environments.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from agentenvs.core import Outcome, TextEnv
from agentenvs.expert import Expert, ExpertDecision

__all__ = [
    "COLORS",
    "ENV_ID",
    "FORK_CHANCE",
    "HIDDEN_FORK_CHANCE",
    "HIDDEN_TRAPS_ENV_ID",
    "HELD_OUT_PAIRS",
    "MAX_TURNS",
    "KeyDoorEnv",
    "KeyDoorExpert",
    "KeyDoorHiddenTrapsEnv",
    "KeyDoorHiddenTrapsExpert",
    "KeyDoorTrapsEnv",
    "KeyDoorTrapsExpert",
    "Layout",
    "TRAPS_ENV_ID",
    "State",
    "layout",
    "shortest_length",
]

ENV_ID = "KeyDoor-v0"
TRAPS_ENV_ID = "KeyDoor-traps-v0"
FORK_CHANCE = 0.5
"""KeyDoor-traps-v0: the chance that a room between the hall and the door is a trap fork. At
0.5 a layout has 1.5-3.5 forks on average (4-8 rooms), so a policy that reads the sign still
loses to a fork it misreads, and a random walker rarely gets through."""
HIDDEN_TRAPS_ENV_ID = "KeyDoor-hidden-traps-v0"
HIDDEN_FORK_CHANCE = 0.25
"""KeyDoor-hidden-traps-v0: the chance of an unmarked trap fork per room. A walker that guesses
each fork survives a layout with chance (1 - 0.25 / 2) ** (rooms - 1), 0.51 at the mean 5: about
half the episodes that took the sign's key are lost at a fork."""
MAX_TURNS = 20
"""The turn limit: about twice the longest expert episode (10 turns), the horizon of the
key-to-door tasks credit assignment is tested on."""
COLORS = ("red", "blue", "green", "yellow", "white", "black", "purple", "orange")
HELD_OUT_PAIRS = frozenset((COLORS[i], COLORS[(i + 3) % len(COLORS)]) for i in range(len(COLORS)))
"""(door colour, distractor colour) pairs that only test layouts have (8 of the 56)."""
TEST_FIRST = 2**16
TEST_COUNT = 200
VALIDATION_FIRST = TEST_FIRST + TEST_COUNT
VALIDATION_COUNT = 200
EXITS = ("north", "south", "east", "west")
_TASK_ID = re.compile(r"layout/(0|[1-9][0-9]{0,9})")


@dataclass(frozen=True)
class Layout:
    """One task: the keys in the order the hall lists them, the door's colour, the number of
    rooms after the hall (the last one has the door), the alcoves {room: exit} and the trap
    forks (room, side exit, the trapped exit: the side exit or ``east``)."""

    keys: tuple[str, ...]
    door: str
    rooms: int
    alcoves: tuple[tuple[int, str], ...]
    forks: tuple[tuple[int, str, str], ...] = ()

    def alcove_of(self, room: int) -> str | None:
        return dict(self.alcoves).get(room)

    def fork_of(self, room: int) -> tuple[str, str] | None:
        """(side exit, trapped exit) of a fork room, else None."""
        for fork_room, side, trap in self.forks:
            if fork_room == room:
                return side, trap
        return None


@dataclass(frozen=True)
class State:
    """Where the player is (room 0 the hall; ``alcove``: in that room's alcove), the key held,
    whether the episode is over and whether a trap ended it."""

    room: int = 0
    alcove: bool = False
    key: str | None = None
    over: bool = False
    trapped: bool = False


def layout(seed: int, fork_chance: float = 0.0) -> Layout:
    """The layout of task ``layout/<seed>`` (test seeds draw held-out colour pairs); with
    ``fork_chance`` > 0 each room between the hall and the door is a trap fork with that chance
    (drawn from a second stream, so every other room is as at 0)."""
    held_out = seed >= TEST_FIRST
    rng = random.Random(f"keydoor|{seed}")
    count = rng.choice((2, 3))
    while True:
        keys = tuple(rng.sample(COLORS, count))
        door = keys[rng.randrange(count)]
        pairs = {(door, k) for k in keys if k != door}
        if bool(pairs & HELD_OUT_PAIRS) == held_out:
            break
    rooms = rng.randint(4, 8)
    alcoves = tuple(
        (room, rng.choice(("north", "south"))) for room in range(1, rooms) if rng.random() < 0.5
    )
    if fork_chance <= 0:
        return Layout(keys, door, rooms, alcoves)
    forks_rng = random.Random(f"keydoor-forks|{seed}")
    forks = []
    for room in range(1, rooms):
        side, trap_east, chance = (
            forks_rng.choice(("north", "south")),
            forks_rng.random() < 0.5,
            forks_rng.random(),
        )
        if chance < fork_chance:
            forks.append((room, side, "east" if trap_east else side))
    fork_rooms = {f[0] for f in forks}
    alcoves = tuple(a for a in alcoves if a[0] not in fork_rooms)
    return Layout(keys, door, rooms, alcoves, tuple(forks))


def shortest_length(lay: Layout, state: State) -> int | None:
    """Actions of a shortest win from ``state`` (None: it cannot be won)."""
    if state.over or (state.key is not None and state.key != lay.door):
        return None
    back = 1 if state.alcove else 0
    if state.key is None:  # back to the hall, take the key, walk to the door, open it
        return back + state.room + 1 + lay.rooms + 1
    return back + (lay.rooms - state.room) + 1


def render(lay: Layout, state: State, marked: bool = True) -> str:
    """The observation of ``state`` (short; the sign only in the hall; a fork's trapped exit
    marked ``(trap)`` where ``marked``)."""
    held = f"You hold the {state.key} key." if state.key else "You hold no key."
    if state.alcove:
        return f"Alcove of room {state.room}. {held} Exits: {_back(lay, state.room)}."
    fork = lay.fork_of(state.room)
    trap = fork[1] if fork and marked else None
    exits = ", ".join(e + (" (trap)" if e == trap else "") for e in _exits(lay, state))
    if state.room == 0:
        keys = "none" if state.key else ", ".join(lay.keys)
        return f"Hall. Sign: the door is {lay.door}. Keys: {keys}. {held} Exits: {exits}."
    door = " A locked door." if state.room == lay.rooms else ""
    return f"Room {state.room}.{door} {held} Exits: {exits}."


def _back(lay: Layout, room: int) -> str:
    return "south" if lay.alcove_of(room) == "north" else "north"


def _exits(lay: Layout, state: State) -> list[str]:
    if state.alcove:
        return [_back(lay, state.room)]
    out = [] if state.room == 0 else ["west"]
    alcove = lay.alcove_of(state.room)
    fork = lay.fork_of(state.room)
    if alcove or fork:
        out.append(alcove or fork[0])
    if state.room < lay.rooms:
        out.append("east")
    return sorted(out, key=EXITS.index)


def transition(lay: Layout, state: State, action: str) -> tuple[State, bool, bool]:
    """(next state, valid, won) of ``action`` (lower-cased, spaces normalised)."""
    if action in _exits(lay, state):
        if state.alcove:
            return State(state.room, False, state.key), True, False
        fork = lay.fork_of(state.room)
        if fork and action == fork[1]:  # the trap
            return State(state.room, False, state.key, over=True, trapped=True), True, False
        if fork and action == fork[0]:  # the fork's other way on
            return State(state.room + 1, False, state.key), True, False
        if action in ("north", "south"):
            return State(state.room, True, state.key), True, False
        step = 1 if action == "east" else -1
        return State(state.room + step, False, state.key), True, False
    if action.startswith("take ") and state.room == 0 and not state.alcove and not state.key:
        color = action[5:].strip()
        if color in lay.keys:
            return State(0, False, color), True, False
    if action == "open door" and state.room == lay.rooms and not state.alcove and state.key:
        return State(state.room, False, state.key, over=True), True, state.key == lay.door
    return state, False, False


def step_credit(lay: Layout, before: State, after: State) -> float:
    """The oracle's credit of the step ``before`` -> ``after`` (module docstring)."""
    from agentenvs.benchmarks.learning.envs import FATAL_CREDIT

    length = shortest_length(lay, before)
    if length is None:
        return 0.0
    if after.over and not after.trapped:  # the door opened (a wrong key was fatal earlier)
        return float(length - 1)
    then = shortest_length(lay, after)
    return FATAL_CREDIT if then is None else float(length - then - 1)


class KeyDoorEnv(TextEnv):
    """Take the key the sign names, walk east to the door and open it (module docstring).

    ## Action Space
    ``north``, ``south``, ``east``, ``west``, ``take <colour>``, ``open door``
    (case-insensitive). Anything else, or an exit that is not there, changes nothing and still
    uses a turn (``valid`` False).
    """

    env_id: ClassVar[str] = ENV_ID
    fork_chance: ClassVar[float] = 0.0
    """Chance of a trap fork per room between the hall and the door (:func:`layout`)."""
    marked: ClassVar[bool] = True
    """Whether a fork's trapped exit is marked ``(trap)`` in the observation."""
    splits: ClassVar[tuple[str, ...]] = ("train", "validation", "test")
    default_max_turns: ClassVar[int] = MAX_TURNS
    task_id_forms: ClassVar[tuple[str, ...]] = (
        "layout/<0-65535> (train)",
        "layout/<65536-65735> (test)",
        "layout/<65736-65935> (validation)",
    )

    def __init__(self, max_turns: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self._layout: Layout | None = None
        self._state = State()
        self._credit = 0.0
        self._solvable = True

    def task_ids(self, split: str) -> list[str]:
        if split == "train":
            return [f"layout/{n}" for n in range(TEST_FIRST)]
        if split == "test":
            return [f"layout/{n}" for n in range(TEST_FIRST, TEST_FIRST + TEST_COUNT)]
        if split == "validation":
            last = VALIDATION_FIRST + VALIDATION_COUNT
            return [f"layout/{n}" for n in range(VALIDATION_FIRST, last)]
        raise self._unknown_split(split)

    def _draw_train_task(self) -> str:
        return f"layout/{int(self.np_random.integers(TEST_FIRST))}"

    def family(self, task_id: str) -> str:
        return f"{len(layout(self._seed_of(task_id)).keys)}-keys"

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise self._reset_needed()
        return self._layout

    @property
    def state(self) -> State:
        return self._state

    def _start_task(self, task_id: str) -> str:
        self._layout = layout(self._seed_of(task_id), self.fork_chance)
        self._state = State()
        self._credit = 0.0
        self._solvable = True
        return render(self._layout, self._state, self.marked)

    def _apply(self, action: str) -> Outcome:
        lay = self.layout
        before = self._state
        after, valid, won = transition(lay, before, " ".join(action.lower().split()))
        self._credit = step_credit(lay, before, after)
        self._solvable = shortest_length(lay, before) is not None
        self._state = after
        if after.trapped:
            return Outcome("You fall into a trap.", 0.0, valid=True, won=False, terminated=True)
        if after.over:
            text = "The door opens." if won else "The key does not fit; the door stays shut."
            return Outcome(text, 1.0 if won else 0.0, valid=True, won=won, terminated=True)
        return Outcome(render(lay, after, self.marked), 0.0, valid=valid)

    def _admissible_actions(self) -> list[str]:
        state, lay = self._state, self.layout
        out = list(_exits(lay, state))
        if state.room == 0 and not state.alcove and state.key is None:
            out += [f"take {k}" for k in lay.keys]
        if state.room == lay.rooms and not state.alcove and state.key:
            out.append("open door")
        return out

    def _extra_info(self) -> dict[str, Any]:
        return {"step_credit": self._credit, "solvable": self._solvable}

    def _get_state(self) -> Any:
        return (self._state, self._credit, self._solvable)

    def _set_state(self, task_id: str, state: Any) -> None:
        self._layout = layout(self._seed_of(task_id), self.fork_chance)
        self._state, self._credit, self._solvable = state

    def fields(self, observation: str) -> dict[str, Any]:
        if self._layout is None or observation != self._observation:
            return {}
        s = self._state
        return {"room": s.room, "alcove": s.alcove, "key": s.key or ""}

    def _seed_of(self, task_id: str) -> int:
        found = _TASK_ID.fullmatch(task_id) if isinstance(task_id, str) else None
        seed = int(found.group(1)) if found else -1
        if not 0 <= seed < VALIDATION_FIRST + VALIDATION_COUNT:
            raise self._unknown_task(str(task_id))
        return seed

    def _reset_needed(self) -> Exception:
        from agentenvs.core import ResetNeededError

        return ResetNeededError("call reset() before reading the layout")


class KeyDoorTrapsEnv(KeyDoorEnv):
    """KeyDoor with trap forks (module docstring): in a fork room one of the two ways on is
    marked ``(trap)`` and ends the episode unrewarded; the other leads to the next room."""

    env_id: ClassVar[str] = TRAPS_ENV_ID
    fork_chance: ClassVar[float] = FORK_CHANCE


class KeyDoorHiddenTrapsEnv(KeyDoorEnv):
    """KeyDoor with unmarked trap forks (module docstring): a fork looks like an alcove room, so
    on a layout it has not seen a policy guesses, and a loss after the sign's key is chance the
    key did not cause; the expert knows the layout and avoids them."""

    env_id: ClassVar[str] = HIDDEN_TRAPS_ENV_ID
    fork_chance: ClassVar[float] = HIDDEN_FORK_CHANCE
    marked: ClassVar[bool] = False


class KeyDoorExpert(Expert):
    """Takes the sign's key, walks east (never into an alcove; at a fork, the way on that is not
    the trap) and opens the door."""

    env_id = ENV_ID

    def act(self, env: TextEnv) -> ExpertDecision:
        lay, state = env.unwrapped.layout, env.unwrapped.state
        if state.alcove:
            return ExpertDecision(_back(lay, state.room), "This alcove is a dead end.")
        if state.key is None:
            if state.room > 0:
                return ExpertDecision("west", "The keys are in the hall.")
            return ExpertDecision(f"take {lay.door}", f"The sign names the {lay.door} door.")
        fork = lay.fork_of(state.room)
        if fork:
            way = fork[0] if fork[1] == "east" else "east"
            return ExpertDecision(way, f"The {fork[1]} exit is a trap.")
        if state.room < lay.rooms:
            return ExpertDecision("east", "The door is further east.")
        return ExpertDecision("open door", "I hold the sign's key.")


class KeyDoorTrapsExpert(KeyDoorExpert):
    """:class:`KeyDoorExpert` for KeyDoor-traps-v0."""

    env_id = TRAPS_ENV_ID


class KeyDoorHiddenTrapsExpert(KeyDoorExpert):
    """:class:`KeyDoorExpert` for KeyDoor-hidden-traps-v0 (it reads the layout, not the
    observation)."""

    env_id = HIDDEN_TRAPS_ENV_ID
