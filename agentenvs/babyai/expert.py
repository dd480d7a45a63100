"""The BabyAI-Text expert: minigrid's own ``BabyAIBot`` translated into text actions.

The bot plans in primitive actions (left, right, forward, pickup, drop, toggle); one text turn
can run many of them. The expert keeps a *shadow* (:mod:`agentenvs.babyai.bot`): a private
copy of the episode's minigrid state with a bot that has been told every primitive the text
environment ran. At each call it rolls the bot forward on a copy of the shadow up to its next
*event* (a pickup, drop or toggle, a completed part of the instruction, or the end of the
mission) and picks the text action that gets there in the fewest turns:

1. the event's own high-level action (``pickup <obj> <id>`` for a pickup, ``toggle and go
   through <door> <id>`` for a door the bot opens and walks into, ``go to <obj> <id>`` for a
   ``go to`` part or a door to open), when a run on copies confirms it achieves the event and
   the bot expected every pickup, drop and toggle in it;
2. else the ``go to``/``go through`` action that ends furthest along the bot's path;
3. else the bot's next primitive (``turn left``, ``turn right``, ``move forward``,
   ``pickup <obj> <id>``, ``drop``, ``toggle``).

Two deliberate departures from the bot, because its exploration costs far more turns than the
20-30 turn budget allows (GoToObjMaze, FindObj, OneRoomS20, GoToImpUnlock): while the bot explores
for an object it has not seen, the expert walks towards that object's true position (read from
the environment state, a teacher's privilege) until the bot sees it; and when only a locked door
leads there, the expert has the bot open that door at once (its own subgoals then fetch the key)
instead of first exploring every other reachable cell.

The shadow is rebuilt from the environment state, with the instruction parts its verifier has not
completed, when it disagrees with the environment (a restored snapshot, someone else's action) or
when the bot did not expect an action. Limits: a step cap on the bot's rollout and on its
replanning loop, and a wall-clock limit per decision; hitting one raises :class:`ExpertFailure`
instead of hanging. By design it cannot do what the text interface cannot express: open a box
(KeyInBox), close a door (an ``open`` instruction for a door that is already open), or follow
the bot where it fails itself (OpenDoorsOrder debug levels, the UnlockToUnlock seeds it loops
on).
"""

from __future__ import annotations

import copy
import heapq
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.verifier import ObjDesc
from minigrid.utils.baby_ai_bot import GoNextToSubgoal, OpenSubgoal

from agentenvs.babyai.bot import (
    DIR_VECS,
    MOVES,
    PlanStep,
    Shadow,
    Unexpressible,
    bot_call,
    front_cell,
    rollout,
)
from agentenvs.babyai.text import DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE, Target, run_primitives
from agentenvs.expert import Expert, ExpertDecision, ExpertFailure

if TYPE_CHECKING:
    from agentenvs.babyai.env import BabyAITextEnv
    from agentenvs.core import TextEnv

__all__ = ["BabyAIExpert", "DEFAULT_STEP_CAP", "DEFAULT_TIME_LIMIT_S"]

DEFAULT_STEP_CAP = 400  # primitives the bot may plan ahead for one decision
DEFAULT_TIME_LIMIT_S = 10.0  # wall-clock limit of one decision
_PRIMITIVE_TEXT = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward"}
_MAX_DECISIONS = 1000  # decisions in one episode


# ----- the expert ------------------------------------------------------------------------------


class BabyAIExpert(Expert):
    """Acts in ``BabyAI-Text-v0`` by following minigrid's ``BabyAIBot`` (see the module doc).

    ``step_cap`` bounds the primitives the bot plans ahead per decision, ``time_limit_s`` the
    wall-clock time of one decision.
    """

    env_id = "BabyAI-Text-v0"

    def __init__(
        self, step_cap: int = DEFAULT_STEP_CAP, time_limit_s: float = DEFAULT_TIME_LIMIT_S
    ) -> None:
        if step_cap < 1 or time_limit_s <= 0:
            raise ValueError("step_cap must be at least 1 and time_limit_s positive")
        self.step_cap = step_cap
        self.time_limit_s = time_limit_s
        self._shadow: Shadow | None = None
        self._decisions = 0

    def reset(self) -> None:
        self._shadow = None
        self._decisions = 0

    def act(self, env: TextEnv) -> ExpertDecision:
        from agentenvs.babyai.env import BabyAITextEnv

        if not isinstance(env, BabyAITextEnv):
            raise ExpertFailure(
                f"the BabyAI expert needs a BabyAI-Text-v0 environment, got {env!r}"
            )
        if env.done:
            raise ExpertFailure("the episode is over; reset the environment")
        self._decisions += 1
        if self._decisions > _MAX_DECISIONS:
            raise ExpertFailure(f"more than {_MAX_DECISIONS} decisions in one episode")
        deadline = time.monotonic() + self.time_limit_s
        live = env.minigrid
        if self._shadow is None or not self._shadow.matches(live):
            self._shadow = Shadow.rebuild(live, env.parity, deadline)
            fresh = True
        else:
            fresh = False
        _open_the_way(self._shadow)
        try:
            decision = self._decide(env, deadline)
        except Unexpressible:
            if fresh:
                raise
            # the bot's pending subgoals ask for what text cannot do (e.g. closing a door it
            # reopened): start over from the instruction, keeping what it has explored
            self._shadow = Shadow.rebuild(live, env.parity, deadline, self._shadow.bot.vis_mask)
            decision = self._decide(env, deadline)
        shadow = self._shadow
        primitives = env.expand(decision.action)
        if primitives and not shadow.advance(primitives, env.image, deadline):
            try:
                self._shadow = Shadow.rebuild(shadow.env, env.parity, deadline, shadow.bot.vis_mask)
            except ExpertFailure:
                self._shadow = None  # (the mission may be over) rebuilt at the next decision
        return decision

    def _decide(self, env: BabyAITextEnv, deadline: float) -> ExpertDecision:
        assert self._shadow is not None
        plan = rollout(self._shadow, self.step_cap, deadline)
        if not plan:
            raise Unexpressible("the BabyAI bot considers the mission done, but it is not")
        return _choose(env, self._shadow, plan)


def _choose(env: BabyAITextEnv, shadow: Shadow, plan: list[PlanStep]) -> ExpertDecision:
    """The text action that reaches the plan's first event (or gets furthest towards it)."""
    event = next((i for i, s in enumerate(plan) if s.is_event), None)
    if event == 0:
        return _primitive(env, plan[0])
    if shadow.bot.stack and shadow.bot.stack[-1].is_exploratory():
        decision = _guided_explore(env, shadow)
        if decision is not None:
            return decision
    if event is not None:
        decision = _event_macro(env, shadow, plan, event)
        if decision is not None:
            return decision
    horizon = event if event is not None else len(plan)
    decision = _progress_macro(env, plan[:horizon]) if horizon >= 2 else None
    return decision if decision is not None else _primitive(env, plan[0])


def _primitive(env: BabyAITextEnv, step: PlanStep) -> ExpertDecision:
    """The text form of one primitive of the plan."""
    view = env.view
    if step.action in _PRIMITIVE_TEXT:
        text = _PRIMITIVE_TEXT[step.action]
        if text in view.actions:
            return ExpertDecision(text, f"Following the planned route: {text}.")
        raise Unexpressible(f"the bot wants to {text}, which the text interface does not offer")
    if step.action == PICKUP:
        for action in view.actions:
            if action.startswith("pickup ") and view.target(action) == step.front:
                return ExpertDecision(
                    action, f"The {_name(action)} is right in front of me; pick it up."
                )
        raise Unexpressible("the bot wants to pick up something no pickup action names")
    if step.action == DROP and "drop" in view.actions:
        return ExpertDecision("drop", "Put down what I am carrying here.")
    if step.action == TOGGLE and "toggle" in view.actions:
        return ExpertDecision("toggle", "Open the door in front of me.")
    what = {DROP: "drop", TOGGLE: "toggle what is in front (a box or an open door)"}.get(
        step.action, "declare the mission done"
    )
    raise Unexpressible(f"the bot wants to {what}, which the text interface cannot do here")


def _event_macro(
    env: BabyAITextEnv, shadow: Shadow, plan: list[PlanStep], event: int
) -> ExpertDecision | None:
    """The high-level action that achieves the plan's event at ``event`` in one turn, if any."""
    step = plan[event]
    view = env.view
    candidates: list[tuple[str, str]] = []
    wanted: tuple[str, str] | None = None
    if step.action == PICKUP:
        candidates += [
            (a, "pickup")
            for a in view.actions
            if a.startswith("pickup ") and view.target(a) == step.front
        ]
        obj = env.minigrid.grid.get(*step.front)
        wanted = (obj.type, obj.color) if obj is not None else None
    elif step.action == TOGGLE:
        # (in parity mode the step after a winning toggle would undo the success)
        walks_in = (step.terminated and not env.parity) or (
            not step.terminated and event + 1 < len(plan) and plan[event + 1].action == FORWARD
        )
        if walks_in:
            candidates += [
                (a, "through")
                for a in view.actions
                if a.startswith("toggle and go through ") and view.target(a) == step.front
            ]
        candidates += [
            (a, "face")
            for a in view.actions
            if a.startswith("go to ") and view.target(a) == step.front
        ]
    elif step.action in MOVES:
        candidates += [
            (a, "face")
            for a in view.actions
            if a.startswith("go to ") and view.target(a) == step.front_after
        ]
    for action, kind in candidates:
        if not env.expand(action):
            continue  # already there: the bot's own next primitive decides
        result = _simulate(env, action)
        if kind == "pickup" and result.carrying != wanted:
            continue
        if not _achieves(result, kind, step):
            continue
        trial = copy.deepcopy(shadow)
        if not trial.advance(env.expand(action) or [], env.image, trial.bot.deadline):
            continue  # the bot would not have done it yet (it first explores elsewhere)
        if kind == "face" and step.action == TOGGLE and trial.suggestion != TOGGLE:
            continue  # the bot has more to see before it opens that door
        return ExpertDecision(action, _macro_thought(action, kind, step))
    return None


def _progress_macro(env: BabyAITextEnv, path: list[PlanStep]) -> ExpertDecision | None:
    """The ``go to``/``go through`` action that ends furthest along the bot's path (more than one
    primitive ahead), if any."""
    view = env.view
    best: tuple[int, str] | None = None
    for action in view.actions:
        spec = view.actions[action]
        if not isinstance(spec, Target) or spec.suffix:
            continue
        if FORWARD not in (env.expand(action) or []):
            continue  # only turns (or nothing): the primitives do that
        result = _simulate(env, action)
        # the first time the path passes there: a later pass comes back from a detour (the bot
        # exploring), which the macro would skip
        reached = next((i for i, s in enumerate(path) if s.pos_after == result.pos), None)
        if reached is not None and reached >= 1 and (best is None or reached > best[0]):
            best = (reached, action)
    if best is None:
        return None
    return ExpertDecision(
        best[1], f"Heading along the planned route by way of the {_name(best[1])}."
    )


def _guided_explore(env: BabyAITextEnv, shadow: Shadow) -> ExpertDecision | None:
    """While the bot explores for an object it has not seen: walk towards that object's true
    position (read from the environment state), by the action that ends closest to it, or one
    primitive along a shortest path; None when the bot seeks nothing or it is out of reach."""
    targets = _sought_cells(shadow.bot)
    mg = env.minigrid
    if not targets:
        return None
    dist = _distance_field(mg, targets)
    here = (int(mg.agent_pos[0]), int(mg.agent_pos[1]))
    if here not in dist:
        return None
    best: tuple[int, int, str] | None = None
    for action in env.view.actions:
        primitives = env.expand(action) or []
        if FORWARD not in primitives or PICKUP in primitives or DROP in primitives:
            continue
        result = _simulate(env, action)
        if result.won:
            return ExpertDecision(action, f"{action.capitalize()}: that completes the mission.")
        d = dist.get(result.pos)
        if d is not None and d < dist[here] and (best is None or (d, len(primitives)) < best[:2]):
            best = (d, len(primitives), action)
    if best is not None:
        return ExpertDecision(
            best[2],
            f"What I need is not in sight yet; {best[2]} brings me closer to where it must be.",
        )
    return _step_towards(env, dist, here, targets)


def _sought_cells(bot: Any) -> list[tuple[int, int]]:
    """Where the objects are that the bot's topmost non-exploring subgoal goes to."""
    carrying = bot.mission.unwrapped.carrying
    for subgoal in reversed(bot.stack):
        if subgoal.is_exploratory():
            continue
        if not isinstance(subgoal, GoNextToSubgoal):
            return []
        datum = subgoal.datum
        if isinstance(datum, ObjDesc):
            return [
                tuple(int(v) for v in o.cur_pos)
                for o in datum.obj_set
                if o is not carrying and o.cur_pos is not None and o.type != "wall"
            ]
        if isinstance(datum, WorldObj):
            return [tuple(int(v) for v in datum.cur_pos)] if datum.cur_pos is not None else []
        return [tuple(int(v) for v in datum)]
    return []


def _distance_field(
    env: Any, targets: list[tuple[int, int]], through_locked: bool = False
) -> dict[tuple[int, int], int]:
    """Steps from each cell to a cell next to a target over the true grid (a closed door costs
    one more step to open; locked doors only with their key or ``through_locked``; objects and
    walls block)."""
    carrying = env.carrying

    def enter_cost(cell: tuple[int, int]) -> int | None:
        if not (0 <= cell[0] < env.width and 0 <= cell[1] < env.height):
            return None
        obj = env.grid.get(*cell)
        if obj is None or obj.type in ("floor", "goal"):
            return 1
        if obj.type != "door":
            return None
        if obj.is_open:
            return 1
        if (
            obj.is_locked
            and not through_locked
            and not (
                carrying is not None and carrying.type == "key" and carrying.color == obj.color
            )
        ):
            return None
        return 2

    here = (int(env.agent_pos[0]), int(env.agent_pos[1]))
    dist: dict[tuple[int, int], int] = {}
    heap: list[tuple[int, tuple[int, int]]] = []
    for tx, ty in targets:
        for cell in ((tx + 1, ty), (tx - 1, ty), (tx, ty + 1), (tx, ty - 1)):
            if (cell == here or enter_cost(cell) is not None) and cell not in dist:
                dist[cell] = 0
                heap.append((0, cell))
    heapq.heapify(heap)
    while heap:
        d, (x, y) = heapq.heappop(heap)
        if d > dist[(x, y)]:
            continue
        cost = 1 if (x, y) == here else enter_cost((x, y)) or 1
        for nxt in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if nxt != here and enter_cost(nxt) is None:
                continue
            if nxt not in dist or d + cost < dist[nxt]:
                dist[nxt] = d + cost
                heapq.heappush(heap, (d + cost, nxt))
    return dist


def _open_the_way(shadow: Shadow) -> None:
    """When the bot explores for an object that only a locked door leads to, have it open that
    door now (its own door-opening subgoals fetch the key) instead of first exploring every
    other cell it can reach, as its exploration would."""
    bot, env = shadow.bot, shadow.env
    if not (bot.stack and bot.stack[-1].is_exploratory()):
        return
    targets = _sought_cells(bot)
    here = (int(env.agent_pos[0]), int(env.agent_pos[1]))
    if not targets or here in _distance_field(env, targets):
        return
    dist = _distance_field(env, targets, through_locked=True)
    door = None
    cell = here
    while cell in dist and dist[cell] > 0 and door is None:
        x, y = cell
        cell = min(
            (n for n in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)) if n in dist),
            key=lambda n: dist[n],
            default=None,
        )
        if cell is None or dist[cell] >= dist[(x, y)]:
            return
        obj = env.grid.get(*cell)
        if obj is not None and obj.type == "door" and obj.is_locked:
            door = obj
    if door is None:
        return
    while bot.stack and bot.stack[-1].is_exploratory():
        bot.stack.pop()
    bot.stack.append(OpenSubgoal(bot))
    bot.stack.append(GoNextToSubgoal(bot, door, reason="Open"))
    shadow.suggestion = bot_call(bot.replan, None)


def _step_towards(
    env: BabyAITextEnv,
    dist: dict[tuple[int, int], int],
    here: tuple[int, int],
    targets: list[tuple[int, int]],
) -> ExpertDecision | None:
    """One primitive along a shortest path of ``dist`` (or turning to face a target)."""
    mg = env.minigrid
    d = mg.agent_dir
    if dist[here] == 0:
        goals = [t for t in targets if abs(t[0] - here[0]) + abs(t[1] - here[1]) == 1]
    else:
        goals = [
            n
            for n in (
                (here[0] + 1, here[1]),
                (here[0] - 1, here[1]),
                (here[0], here[1] + 1),
                (here[0], here[1] - 1),
            )
            if n in dist and dist[n] < dist[here]
        ]
    if not goals:
        return None
    goals.sort(key=lambda n: dist.get(n, 0))
    front = (here[0] + DIR_VECS[d][0], here[1] + DIR_VECS[d][1])
    right = (here[0] + DIR_VECS[(d + 1) % 4][0], here[1] + DIR_VECS[(d + 1) % 4][1])
    if front in goals:
        cell = mg.grid.get(*front)
        text = (
            "toggle"
            if cell is not None and cell.type == "door" and not cell.is_open
            else ("move forward")
        )
    else:
        text = "turn right" if right in goals else "turn left"
    if text not in env.view.actions:
        return None
    return ExpertDecision(text, f"What I need is not in sight yet; {text} towards it.")


@dataclass(frozen=True)
class _Result:
    pos: tuple[int, int]
    front: tuple[int, int]
    carrying: tuple[str, str] | None
    front_open: bool
    won: bool


def _simulate(env: BabyAITextEnv, action: str) -> _Result:
    """What ``action`` would do, run on a copy of the environment's minigrid state."""
    sim = copy.deepcopy(env.minigrid)
    primitives = env.expand(action) or []
    won = False
    if primitives:
        done = run_primitives(sim, primitives, env.image, stop_when_terminated=not env.parity)
        won = done.status == "success"
    front = front_cell(sim)
    inside = 0 <= front[0] < sim.width and 0 <= front[1] < sim.height
    cell = sim.grid.get(*front) if inside else None
    carrying = (sim.carrying.type, sim.carrying.color) if sim.carrying is not None else None
    return _Result(
        (int(sim.agent_pos[0]), int(sim.agent_pos[1])),
        front,
        carrying,
        bool(cell is not None and cell.type == "door" and cell.is_open),
        won,
    )


def _achieves(result: _Result, kind: str, step: PlanStep) -> bool:
    if step.terminated and result.won:
        return True
    if kind == "pickup":
        return result.carrying is not None
    if kind == "through":
        return result.pos == step.front
    return result.front == (step.front_after if step.action in MOVES else step.front)


def _name(action: str) -> str:
    """``go to red ball 1`` -> ``red ball 1``."""
    for prefix in ("toggle and go through ", "go through ", "go to ", "pickup "):
        if action.startswith(prefix):
            return action[len(prefix) :]
    return action


def _macro_thought(action: str, kind: str, step: PlanStep) -> str:
    name = _name(action)
    if kind == "pickup":
        return f"I need the {name}; go and pick it up."
    if kind == "through":
        return f"The way on leads through the {name}; open it and go through."
    if step.action == TOGGLE:
        return f"Walk up to the {name} so I can open it."
    if step.terminated:
        return f"The {name} is what the mission asks for; go next to it."
    return f"Go to the {name}, the next part of the mission."
