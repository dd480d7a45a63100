"""The expert: binary search between the bounds the answers so far leave."""

from __future__ import annotations

from agentenvs.expert import Expert, ExpertDecision


class GuessExpert(Expert):
    env_id = "Guess-v0"

    def act(self, env) -> ExpertDecision:
        guess = (env.low + env.high) // 2
        return ExpertDecision(f"guess {guess}", f"It is from {env.low} to {env.high}.")
