"""The ALFWorld expert: follows the game's stored walkthrough, replans with the planner off it.

Every ALFWorld game file stores a reference solution (``walkthrough``, 4-10 commands). While the
episode's state-changing commands are a prefix of it, the expert plays its next command. Once the
episode has left it (a restored snapshot, someone else's actions, an action the walkthrough does
not expect), it makes a new plan from the current state and follows it while the episode stays
on it, planning again whenever the episode leaves it. A new plan comes from, in order:

1. a repaired walkthrough, checked by playing it on a scratch copy of the episode (restored from
   a snapshot): put back an object the walkthrough does not use, then the walkthrough's commands,
   skipping a ``go to`` or ``open`` that is already done and a ``take`` of the object in hand.
   It is kept only if it wins (under a second for most detours);
2. alfworld's planner (fast-downward through textworld's ``replan``, what alfworld's
   ``AlfredExpert(expert_type="planner")`` uses): exact, but from a few milliseconds to minutes.

Some games have dead ends: an object that no receptacle of its game accepts (no ``canContain``
fact), such as a paper towel roll in some kitchens, can be picked up but never put down, and the
agent holds one object at a time; after such a detour the planner finds no plan and the expert
raises :class:`ExpertFailure` saying so.

Commands that change nothing the plan depends on (``look``, ``inventory``, ``help``,
``examine ...``) are ignored when comparing the episode with a plan.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentenvs.expert import Expert, ExpertDecision, ExpertFailure

if TYPE_CHECKING:
    from agentenvs.alfworld import ALFWorldEnv
    from agentenvs.core import TextEnv

__all__ = ["ALFWorldExpert", "thought_for"]

_NEUTRAL_COMMANDS = ("look", "inventory", "help")
_TAKE = re.compile(r"take (?P<obj>.+) from (?P<recep>.+)")
_MOVE = re.compile(r"move (?P<obj>.+) to (?P<recep>.+)")  # alfworld 0.4's put-down
_PUT = re.compile(r"put (?P<obj>.+) in/on (?P<recep>.+)")  # agentgym's (alfworld 0.3.3's)


def _changes_state(command: str) -> bool:
    return command not in _NEUTRAL_COMMANDS and not command.startswith("examine ")


def _effective(commands: list[str] | tuple[str, ...]) -> list[str]:
    return [c for c in commands if _changes_state(c)]


def _held_object(done: list[str]) -> tuple[str, str] | None:
    """(object, where it was taken from) if the episode's commands leave the agent holding one."""
    held = None
    for command in done:
        if m := _TAKE.fullmatch(command):
            held = (m["obj"], m["recep"])
        elif _puts_down(command):
            held = None
    return held


def _puts_down(command: str) -> bool:
    return bool(_MOVE.fullmatch(command) or _PUT.fullmatch(command))


def thought_for(action: str) -> str:
    """A one-line reason for a command (the ``Think:`` line of a teacher reply).

    The thought names the command's own verb: ``move ... to`` (alfworld 0.4) or ``put ... in/on``
    (agentgym), ``use`` for the light (both versions' command; neither has ``toggle``)."""
    words = action.split()
    verb = words[0] if words else ""
    if action.startswith("go to "):
        return f"Next I go to the {action[6:]}."
    if verb == "take" and " from " in action:
        obj, recep = action[5:].split(" from ", 1)
        return f"The {obj} is here; I take it from the {recep}."
    if m := _MOVE.fullmatch(action):
        return f"I move the {m['obj']} to the {m['recep']}."
    if m := _PUT.fullmatch(action):
        return f"I put the {m['obj']} in/on the {m['recep']}."
    if verb in ("heat", "cool", "clean") and " with " in action:
        obj, tool = action[len(verb) + 1 :].split(" with ", 1)
        return f"I {verb} the {obj} with the {tool}."
    if verb in ("open", "close"):
        return f"I {verb} the {action[len(verb) + 1 :]}."
    if verb == "use":
        return f"I use the {action[4:]} to turn it on."
    return f"Next: {action}."


class ALFWorldExpert(Expert):
    """Walkthrough follower for ``ALFWorld-v0`` that recovers off it (see the module docstring)."""

    env_id = "ALFWorld-v0"

    def __init__(self) -> None:
        self._plan: tuple[str, list[str], list[str]] | None = None  # (task, done before, plan)
        self._scratch: ALFWorldEnv | None = None  # where repaired walkthroughs are tried
        self.repairs = 0  # repaired walkthroughs used since construction (for reports)
        self.replans = 0  # planner calls since construction (for reports)

    def reset(self) -> None:
        self._plan = None

    def act(self, env: TextEnv) -> ExpertDecision:
        alf = _alfworld_env(env)
        if alf.task_id is None or alf.done:
            raise ExpertFailure("the episode is not running; reset the environment first")
        done = _effective(alf.action_log)
        admissible = set(alf.admissible_actions() or ())
        action = self._follow(alf.task_id, [], _effective(alf.walkthrough), done, admissible)
        if action is None and self._plan is not None and self._plan[0] == alf.task_id:
            _, before, plan = self._plan
            action = self._follow(alf.task_id, before, plan, done, admissible)
        if action is None:
            action = self._replan(alf, done, admissible)
        return ExpertDecision(action, thought_for(action))

    @staticmethod
    def _follow(
        task_id: str, before: list[str], plan: list[str], done: list[str], admissible: set[str]
    ) -> str | None:
        """The next command of ``plan`` (made after ``before``) if the episode is still on it."""
        if done[: len(before)] != before:
            return None
        rest = done[len(before) :]
        if len(rest) >= len(plan) or plan[: len(rest)] != rest:
            return None
        nxt = plan[len(rest)]
        return nxt if nxt in admissible else None

    def _replan(self, alf: ALFWorldEnv, done: list[str], admissible: set[str]) -> str:
        plan = self._repaired_walkthrough(alf, done)
        if plan:
            self.repairs += 1
        else:
            self.replans += 1
            plan = _effective(alf.plan())
        if not plan:
            held = _held_object(done)
            why = (
                (
                    f"; the agent holds the {held[0]}, which may fit no receptacle of this game "
                    f"(a dead end)"
                )
                if held
                else ""
            )
            raise ExpertFailure(f"{alf.task_id}: the planner finds no way to the goal{why}")
        if plan[0] not in admissible:
            raise ExpertFailure(
                f"{alf.task_id}: the planner's next command {plan[0]!r} is not admissible"
            )
        self._plan = (alf.task_id, done, plan)
        return plan[0]

    def _repaired_walkthrough(self, alf: ALFWorldEnv, done: list[str]) -> list[str] | None:
        """The walkthrough adapted to the current state, if playing it on a scratch copy wins."""
        walkthrough = _effective(alf.walkthrough)
        held = _held_object(done)
        candidate = list(walkthrough)
        holding = held[0] if held else None
        if held and not any(c.startswith(f"take {held[0]} from ") for c in walkthrough):
            put_back = alf.version.put_command(held[0], held[1])
            candidate = [f"go to {held[1]}", put_back, *walkthrough]
        scratch = self._scratch_env(alf)
        scratch.restore(alf.snapshot())
        plan = []
        for command in candidate:
            if command not in scratch.admissible_actions():
                taken = _TAKE.fullmatch(command)
                if command.startswith(("go to ", "open ")) or (taken and taken["obj"] == holding):
                    continue  # already there, already open, already in hand
                return None
            scratch.step(command)
            plan.append(command)
            if _puts_down(command):
                holding = None
            if scratch.won:
                return plan
        return None

    def _scratch_env(self, alf: ALFWorldEnv) -> ALFWorldEnv:
        if self._scratch is None:
            self._scratch = type(alf)(
                max_turns=10**9,
                data_dir=alf.data_dir,
                cache_dir=alf.cache_dir,
                game_version=alf.game_version,
            )
        elif self._scratch.game_version != alf.game_version:
            self._scratch.close()
            self._scratch = None
            return self._scratch_env(alf)
        return self._scratch


def _alfworld_env(env: TextEnv) -> ALFWorldEnv:
    from agentenvs.alfworld import ALFWorldEnv

    alf = getattr(env, "unwrapped", env)
    if not isinstance(alf, ALFWorldEnv):
        raise TypeError(f"ALFWorldExpert plays ALFWorld-v0, got {type(alf).__name__}")
    return alf
