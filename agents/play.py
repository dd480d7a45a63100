"""``agentenvs play ENV_ID``: play an environment in the terminal, with the expert at hand.

Each turn shows the observation, the admissible actions (where the benchmark lists them) and
reads one action. Lines starting with ``:`` are commands, not actions (:data:`HELP`, printed as
plain text by ``:help``). With ``--hint`` the expert's suggestion is shown once per turn, and
``:auto`` plays that same suggestion (the expert is asked once per turn).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from agentenvs.core import Snapshot, TextEnv
from agentenvs.expert import EXPERTS, Expert, ExpertFailure, make_expert
from agentenvs.registration import ENVIRONMENTS, make

__all__ = ["PlaySession", "play_main"]

HELP = """\
Lines starting with ':' are commands, not actions:
  :hint             show the expert's suggestion
  :auto [n]         let the expert play n turns (default 1)
  :undo             go back one turn
  :reset [task_id]  start again (a new training task, or task_id)
  :tasks [split]    list the task ids of a split (default test)
  :quit             leave (end of input works too)
  :help             show this list"""


class PlaySession:
    """One interactive session; ``run`` reads lines from ``stdin`` until the input ends."""

    def __init__(self, env: TextEnv, expert: Expert | None, out: TextIO, show_hint: bool) -> None:
        self.env = env
        self.expert = expert
        self.out = out
        self.show_hint = show_hint
        self.history: list[Snapshot] = []
        self.total_reward = 0.0
        # the expert's suggestion for the current state (asked once per turn, shown once)
        self._hint: tuple[int, str | None, str] | None = None

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def start(self, task_id: str | None, seed: int | None) -> None:
        options = {"task_id": task_id} if task_id else None
        obs, info = self.env.reset(seed=seed, options=options)
        self.history.clear()
        self.total_reward = 0.0
        self._hint = None
        if self.expert:
            self.expert.reset()
        self.say(f"== {self.env.env_id} {info['task_id']} (family {info['family']}) ==")
        self.show(obs, info)

    def show(self, obs: str, info: dict) -> None:
        self.say(obs)
        actions = info.get("admissible_actions")
        if actions:
            shown = ", ".join(actions[:40]) + (" ..." if len(actions) > 40 else "")
            self.say(f"[admissible: {shown}]")
        if self.show_hint and not self.env.done:
            self.hint()

    def hint(self, *, repeat: bool = False) -> str | None:
        """The expert's action for the current state, printed the first time (or on ``repeat``).

        The expert is asked once per state (its plan may advance when asked), so the hint that
        ``--hint`` shows and the action ``:auto`` then plays are the same, printed once."""
        if self.expert is None:
            self.say("[no expert for this environment]")
            return None
        key = len(self.history)
        if self._hint is None or self._hint[0] != key:
            try:
                decision = self.expert.act(self.env)
                line = f"[expert: {decision.action}  -- {decision.thought}]"
                self._hint = (key, decision.action, line)
            except ExpertFailure as exc:
                self._hint = (key, None, f"[expert cannot act: {exc}]")
        elif not repeat:
            return self._hint[1]
        self.say(self._hint[2])
        return self._hint[1]

    def act(self, action: str) -> None:
        self.history.append(self.env.snapshot())
        self._hint = None
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total_reward += reward
        flag = "" if info["valid"] else " (invalid)"
        self.say(f"-- turn {info['turn']}/{self.env.max_turns}, reward {reward:g}{flag}")
        self.show(obs, info)
        if terminated or truncated:
            outcome = "won" if info["won"] else ("out of turns" if truncated else "ended")
            self.say(
                f"== episode over: {outcome}, total reward {self.total_reward:g}. "
                ":reset to play again, :quit to leave =="
            )

    def command(self, line: str) -> bool:
        """Run a ``:`` command; returns False to quit."""
        name, _, arg = line[1:].strip().partition(" ")
        arg = arg.strip()
        if name in ("q", "quit", "exit"):
            return False
        if name == "hint":
            self.hint(repeat=True)
        elif name == "auto":
            for _ in range(int(arg) if arg.isdigit() else 1):
                if self.env.done:
                    break
                action = self.hint()  # already printed this turn under --hint
                if action is None:
                    break
                self.act(action)
        elif name == "undo":
            if self.history:
                self._hint = None
                if self.expert:  # the expert's plan belongs to the later state
                    self.expert.reset()
                self.show(*self.env.restore(self.history.pop()))
            else:
                self.say("[nothing to undo]")
        elif name == "reset":
            self.start(arg or None, None)
        elif name == "tasks":
            split = arg or "test"
            self.say(" ".join(self.env.task_ids(split)))
        else:
            self.say(HELP)
        return True

    def run(self, lines: TextIO) -> None:
        while True:
            print("> ", end="", file=self.out, flush=True)
            line = lines.readline()
            if not line:
                self.say()
                return
            line = line.rstrip("\n")
            try:
                if line.startswith(":"):
                    if not self.command(line):
                        return
                elif self.env.done:
                    self.say("[the episode is over: :reset or :quit]")
                else:
                    self.act(line)
            except (ValueError, RuntimeError) as exc:  # bad task ids, splits: say so, go on
                self.say(f"[error: {exc}]")


def play_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="agentenvs play",
        description=__doc__.split("\n\n")[0],
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("env_id", help=f"one of {list(ENVIRONMENTS)}")
    parser.add_argument("--task", help="task id (default: a training task drawn from --seed)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-turns", type=int, default=None)
    parser.add_argument(
        "--hint", action="store_true", help="show the expert's suggestion each turn"
    )
    args = parser.parse_args(argv)
    if args.env_id not in ENVIRONMENTS:
        parser.error(f"unknown environment {args.env_id!r}; choose from {list(ENVIRONMENTS)}")
    kwargs = {"max_turns": args.max_turns} if args.max_turns else {}
    env = make(args.env_id, **kwargs)
    expert = make_expert(args.env_id) if args.env_id in EXPERTS else None
    session = PlaySession(env, expert, sys.stdout, show_hint=args.hint)
    session.say("Type an action, or :help for commands.")
    try:
        session.start(args.task, args.seed)
    except ValueError as exc:
        print(f"agentenvs play: {exc}", file=sys.stderr)
        return 2
    session.run(sys.stdin)
    env.close()
    return 0
