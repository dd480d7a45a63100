"""Guess-v0: find a secret number from 1 to 10; each wrong guess is answered higher or lower."""

from __future__ import annotations

from typing import Any

from agentenvs.core import Outcome, TextEnv

LOW, HIGH = 1, 10
TASKS = 40  # guess/0 .. guess/39: the first 30 train, the last 10 test


class GuessEnv(TextEnv):
    env_id = "Guess-v0"
    splits = ("train", "test")
    default_max_turns = 8
    task_id_forms = (f"guess/<0-{TASKS - 1}>",)

    def task_ids(self, split: str) -> list[str]:
        if split not in self.splits:
            raise self._unknown_split(split)
        keys = range(30) if split == "train" else range(30, TASKS)
        return [f"guess/{k}" for k in keys]

    def family(self, task_id: str) -> str:
        return "low" if self._secret(task_id) <= 5 else "high"

    def _secret(self, task_id: str) -> int:
        source, _, key = task_id.partition("/")
        if source != "guess" or not key.isdigit() or int(key) >= TASKS:
            raise self._unknown_task(task_id)
        return (int(key) * 7 + 3) % HIGH + LOW

    def _start_task(self, task_id: str) -> str:
        self.secret, self.low, self.high = self._secret(task_id), LOW, HIGH
        return f"I am thinking of a number from {LOW} to {HIGH}. Guess it: say 'guess N'."

    def _apply(self, action: str) -> Outcome:
        verb, _, number = action.strip().partition(" ")
        if verb != "guess" or not number.isdigit() or not LOW <= int(number) <= HIGH:
            return Outcome(
                f"Invalid action: say 'guess N' with N from {LOW} to {HIGH}.", valid=False
            )
        n = int(number)
        if n == self.secret:
            return Outcome(f"{n} is right!", reward=1.0, won=True, terminated=True)
        if n < self.secret:
            self.low = max(self.low, n + 1)
            return Outcome(f"{n} is too low.")
        self.high = min(self.high, n - 1)
        return Outcome(f"{n} is too high.")

    def _admissible_actions(self) -> list[str] | None:
        return [f"guess {n}" for n in range(LOW, HIGH + 1)]

    def _get_state(self) -> Any:
        return [self.secret, self.low, self.high]

    def _set_state(self, task_id: str, state: Any) -> None:
        self.secret, self.low, self.high = state
