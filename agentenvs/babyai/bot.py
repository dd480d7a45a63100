"""minigrid's ``BabyAIBot`` as the BabyAI-Text expert drives it: guarded, shadowed, rolled out.

* :class:`GuardedBabyAIBot` is minigrid's bot with its replanning loop bounded and a deadline,
  so the seeds on which it loops forever (GoToImpUnlock, UnlockToUnlock) raise
  :class:`ExpertFailure`.
* :class:`Shadow` is a private copy of the episode's minigrid state with a bot that has been
  told every primitive the text environment ran, so it keeps its memory (explored cells, pending
  subgoals); :meth:`Shadow.rebuild` starts a bot from any state with only the instruction parts
  its verifier has not completed yet.
* :func:`rollout` runs the bot on a copy of a shadow up to its next event.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any

from minigrid.envs.babyai.core.verifier import AfterInstr, PickupInstr, PutNextInstr
from minigrid.utils.baby_ai_bot import BabyAIBot, DropSubgoal, GoNextToSubgoal

from agentenvs.babyai.text import FORWARD, LEFT, RIGHT, run_primitives
from agentenvs.expert import ExpertFailure

__all__ = [
    "DIR_VECS",
    "MOVES",
    "GuardedBabyAIBot",
    "PlanStep",
    "Shadow",
    "Unexpressible",
    "bot_call",
    "front_cell",
    "instruction_progress",
    "new_bot",
    "rollout",
]

DONE = 6  # minigrid's ``done`` action
MOVES = (LEFT, RIGHT, FORWARD)
DIR_VECS = ((1, 0), (0, 1), (-1, 0), (0, -1))
MAX_REPLAN_LOOPS = 200  # subgoal rewrites within one replan before the bot counts as stuck


class Unexpressible(ExpertFailure):
    """The bot's next primitive has no text action here."""


# ----- the guarded bot -------------------------------------------------------------------------


class GuardedBabyAIBot(BabyAIBot):
    """minigrid's ``BabyAIBot`` with its replanning loop bounded and a deadline."""

    deadline: float = math.inf

    def replan(self, action_taken: int | None = None) -> int:
        # minigrid's replan, with its ``while self.stack`` loop bounded
        self._process_obs()
        self._check_erroneous_box_opening(action_taken)
        for subgoal in self.stack:
            subgoal.update_agent_attributes()
        if self.stack:
            self.stack[-1].replan_after_action(action_taken)
        while self.stack and self.stack[-1].is_exploratory():
            self.stack.pop()
        suggestion = None
        for _ in range(MAX_REPLAN_LOOPS):
            if not self.stack:
                break
            suggestion = self.stack[-1].replan_before_action()
            if suggestion is not None:
                break
            if time.monotonic() > self.deadline:
                raise ExpertFailure("the BabyAI bot ran past the time limit while replanning")
        else:
            raise ExpertFailure(
                f"the BabyAI bot rewrote its plan {MAX_REPLAN_LOOPS} times without acting: "
                "minigrid's BabyAIBot loops forever from this state (a limitation of the bot, "
                "not of the task; its plan: "
                + " > ".join(_subgoal_text(g) for g in self.stack[-3:])
                + ")"
            )
        if not self.stack:
            suggestion = self.mission.unwrapped.actions.done
        self._remember_current_state()
        return int(suggestion)


def _subgoal_text(subgoal: Any) -> str:
    """``GoNextTo(yellow key)`` for a bot subgoal (its datum named by colour and type)."""
    datum = subgoal.datum
    if hasattr(datum, "type") and hasattr(datum, "color"):
        datum = f"{datum.color} {datum.type}"
    elif isinstance(datum, tuple) and len(datum) == 2 and datum[1] is None:
        datum = f"{datum[0]}, not seen yet"
    name = type(subgoal).__name__.removesuffix("Subgoal")
    return f"{name}({datum})" if datum is not None else name


def new_bot(env: Any) -> GuardedBabyAIBot:
    """A guarded bot for the (unwrapped) minigrid environment ``env``."""
    return GuardedBabyAIBot(env)


def bot_call(fn: Any, *args: Any) -> Any:
    """Call into the bot, turning its internal errors into :class:`ExpertFailure`."""
    try:
        return fn(*args)
    except ExpertFailure:
        raise
    except Exception as exc:  # the bot asserts its invariants and raises on opened boxes
        raise ExpertFailure(f"the BabyAI bot failed: {type(exc).__name__}: {exc}") from exc


def instruction_progress(instr: Any) -> tuple:
    """How far the instruction's verifier has got (the done flags of its sequencing nodes)."""
    if hasattr(instr, "instr_a"):
        return (
            getattr(instr, "a_done", None) == "success",
            getattr(instr, "b_done", None) == "success",
            instruction_progress(instr.instr_a),
            instruction_progress(instr.instr_b),
        )
    return ()


def _push_remaining(bot: Any, instr: Any) -> None:
    """Push the subgoals of the parts of ``instr`` its verifier has not completed yet (for a
    ``put next`` whose object is already carried: only carrying it over and dropping it)."""
    if not hasattr(instr, "instr_a"):
        carrying = bot.mission.unwrapped.carrying
        if isinstance(instr, PutNextInstr) and any(o is carrying for o in instr.desc_move.obj_set):
            bot.stack.append(DropSubgoal(bot))
            bot.stack.append(GoNextToSubgoal(bot, instr.desc_fixed, reason="PutNext"))
        else:
            bot._process_instr(instr)
        return
    a_left = getattr(instr, "a_done", None) != "success"
    b_left = getattr(instr, "b_done", None) != "success"
    after = isinstance(instr, AfterInstr)
    first, second = (instr.instr_b, instr.instr_a) if after else (instr.instr_a, instr.instr_b)
    first_left, second_left = (b_left, a_left) if after else (a_left, b_left)
    if second_left:
        _push_remaining(bot, second)
    if first_left:
        _push_remaining(bot, first)


def _needs_free_hands(instr: Any, carrying: Any) -> bool:
    """Whether a remaining part of ``instr`` picks something up other than what is carried."""
    if hasattr(instr, "instr_a"):
        return (
            getattr(instr, "a_done", None) != "success"
            and _needs_free_hands(instr.instr_a, carrying)
        ) or (
            getattr(instr, "b_done", None) != "success"
            and _needs_free_hands(instr.instr_b, carrying)
        )
    if isinstance(instr, PutNextInstr):
        return not any(o is carrying for o in instr.desc_move.obj_set)
    return isinstance(instr, PickupInstr)


# ----- the shadow: a private copy of the episode with the bot that follows it -------------------


@dataclass
class Shadow:
    env: Any
    bot: Any
    suggestion: int
    parity: bool
    won: bool = False  # the last advance ended the mission with success

    @classmethod
    def rebuild(cls, live: Any, parity: bool, deadline: float, seen: Any = None) -> Shadow:
        """A new bot on a copy of ``live`` for the instruction parts still to do; ``seen`` is
        the explored-cells mask to start from (a previous bot's of the same episode)."""
        env = copy.deepcopy(live)
        bot = new_bot(env)
        bot.deadline = deadline
        if seen is not None and seen.shape == bot.vis_mask.shape:
            bot.vis_mask = seen.copy()
        bot.stack = []
        _push_remaining(bot, env.instrs)
        if env.carrying is not None and _needs_free_hands(env.instrs, env.carrying):
            bot_call(bot._process_obs)
            drop_at = bot_call(bot._find_drop_pos)
            if drop_at is not None:
                bot.stack.append(DropSubgoal(bot))
                bot.stack.append(GoNextToSubgoal(bot, drop_at))
        suggestion = bot_call(bot.replan, None)
        return cls(env, bot, suggestion, parity)

    def matches(self, live: Any) -> bool:
        """True when the shadow's minigrid state is the live one."""
        env = self.env
        if (
            tuple(env.agent_pos) != tuple(live.agent_pos)
            or env.agent_dir != live.agent_dir
            or env.step_count != live.step_count
        ):
            return False
        mine, theirs = env.carrying, live.carrying
        if (mine is None) != (theirs is None):
            return False
        if mine is not None and (mine.type, mine.color) != (theirs.type, theirs.color):
            return False
        if instruction_progress(env.instrs) != instruction_progress(live.instrs):
            return False
        return bool((env.grid.encode() == live.grid.encode()).all())

    def advance(self, primitives: list[int], image: Any, deadline: float) -> bool:
        """Run ``primitives`` as the text environment will, telling the bot each one. False
        when the bot did not expect one of the pickups, drops or toggles (it would plan to undo
        it) or failed on the way: the caller then starts a new bot from this state."""
        self.bot.deadline = deadline
        expected = True

        def tell(action: int) -> None:
            nonlocal expected
            if action not in MOVES and action != self.suggestion:
                expected = False
            self.suggestion = bot_call(self.bot.replan, action)

        try:
            done = run_primitives(
                self.env, primitives, image, stop_when_terminated=not self.parity, on_step=tell
            )
        except ExpertFailure:
            return False
        self.won = done.status == "success"
        return expected


@dataclass(frozen=True)
class PlanStep:
    """One primitive of the bot's rollout with what the agent faced before and after it."""

    action: int
    front: tuple[int, int]
    pos_after: tuple[int, int]
    front_after: tuple[int, int]
    progressed: bool
    terminated: bool

    @property
    def is_event(self) -> bool:
        return self.action not in MOVES or self.progressed or self.terminated


def front_cell(env: Any) -> tuple[int, int]:
    x, y = env.agent_pos
    dx, dy = DIR_VECS[env.agent_dir]
    return int(x) + dx, int(y) + dy


def rollout(shadow: Shadow, cap: int, deadline: float) -> list[PlanStep]:
    """The bot's primitives from the shadow's state up to its first event (and one more step, to
    see what follows a toggle), on a copy."""
    env, bot = copy.deepcopy((shadow.env, shadow.bot))
    action = shadow.suggestion
    steps: list[PlanStep] = []
    event_at = None
    while len(steps) < cap and action != DONE:
        if time.monotonic() > deadline:
            raise ExpertFailure("the BabyAI bot ran past the time limit while planning")
        front = front_cell(env)
        before = instruction_progress(env.instrs)
        _, _, terminated, _, _ = env.step(action)
        pos = (int(env.agent_pos[0]), int(env.agent_pos[1]))
        step = PlanStep(
            action,
            front,
            pos,
            front_cell(env),
            instruction_progress(env.instrs) != before,
            bool(terminated),
        )
        steps.append(step)
        if terminated or (event_at is not None):
            break
        if step.is_event:
            event_at = len(steps) - 1
        action = bot_call(bot.replan, action)
    return steps
