"""``agentenvs_agent``: a verl agent loop (verl 0.9.1's ``AgentLoopBase``) that plays one
agentenvs episode under a benchmark protocol, with our prompts and parsers.

verl calls ``run(sampling_params, **row)`` once per sample with the dataset row
(:mod:`agentenvs.integrations.verl.dataset` writes ``extra_info = {env_id, task_id, protocol,
...}``). The episode plays under ``extra_info["protocol"]`` (the dataset command's ``--protocol``; a
row without one: the environment's default protocol; ``"none"``: no protocol): the protocol's
environment keywords, prompt, parser, unparseable-reply handling (its feedback, or verl-agent's
projection, stepped) and training turn limit (:class:`agentenvs.agents.episode.TextEpisode`). The
loop:

1. starts the task in a :class:`agentenvs.agents.episode.TextEpisode` and tokenizes its first
   prompt (system prompt, first observation) with verl's continuous-token builder;
2. per turn asks ``server_manager.generate`` (verl's LLM server client; vLLM or SGLang in a
   verl run) for a reply, merges the reply tokens into the running sequence (response mask 1),
   parses it with the protocol's parser and steps the environment (or answers the protocol's
   feedback; a projecting protocol steps the projection),
   and merges the next user turn (response mask 0);
3. stops when the episode ends, after ``max_turns`` replies, or when the response budget
   (``actor_rollout_ref.rollout.response_length``) is spent.

A cut-state start (Prefix-GRPO's query: ``extra_info["prefix_replies"]``, the teacher's replies
before the cut, written by ``python -m agentenvs.integrations.verl.dataset ENV --queries FILE``)
first plays the teacher's replies: their tokens go into the response with mask 1, as if generated
(rollout log-prob 0), each is parsed and stepped like a reply, and their spans are returned as
``agentenvs_prefix_spans``; the student then continues from the cut state. The step keys cover the
student's turns only; ``reward_score`` is the whole episode's reward.

Every turn stays in the context (verl trains on one continuous token sequence per sample, so our
history window is not applied; WebShop's and Sokoban's template prompt is appended as each step's
user turn). The output: ``response_mask`` (1 on generated tokens, 0 on observation tokens),
``reward_score`` (the episode reward: the sum of the environment's rewards; verl puts it on the
last response token as ``rm_scores``), the rollout log-probs when the server returns them, and
``extra_fields`` with the step-level keys :mod:`agentenvs.integrations.verl.estimators` reads
(``agentenvs_turn_spans``, ``agentenvs_anchors``, ``agentenvs_actions``,
``agentenvs_step_rewards``, and for the invalid-action penalty ``agentenvs_format_valid``: per
turn, False where the reply broke the protocol's format, unparseable or projected, and
``agentenvs_invalid_penalty``: the protocol's penalty) plus ``agentenvs_prefix_spans``,
``agentenvs_won``, ``agentenvs_task_id`` and ``agentenvs_protocol`` (the protocol's name, or
``"none"``).

Register it with verl by naming this module in the agent-loop config file
(``actor_rollout_ref.rollout.agent.agent_loop_config_path``; see ``docs/integrations.md``).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from agentenvs.agents.episode import TextEpisode
from agentenvs.integrations.verl.dataset import AGENT_NAME, NO_PROTOCOL, protocol_arg

__all__ = ["AgentenvsAgentLoop"]


@register(AGENT_NAME)
class AgentenvsAgentLoop(AgentLoopBase):
    """Plays ``extra_info["env_id"]`` / ``extra_info["task_id"]``; see the module docstring.

    Settings (``actor_rollout_ref.rollout.multi_turn``): ``max_assistant_turns`` bounds the
    replies (default: the protocol's training turn limit, else the environment's own budget).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = int(self.rollout_config.response_length)
        multi_turn = self.rollout_config.get("multi_turn", None) or {}
        self.max_turns = multi_turn.get("max_assistant_turns", None)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = dict(kwargs.get("extra_info") or {})
        if "env_id" not in info or "task_id" not in info:
            raise ValueError(
                "agentenvs_agent needs extra_info with env_id and task_id "
                "(write the dataset with python -m agentenvs.integrations.verl.dataset)"
            )
        protocol = protocol_arg(info.get("protocol", "default"))
        episode = TextEpisode(str(info["env_id"]), max_turns=self.max_turns, protocol=protocol)
        messages = list(episode.start(str(info["task_id"])))
        state = _State(await self.ct_build_initial_tokens(messages))
        teacher = info.get("prefix_replies")  # a list, or an array when read back by pandas
        for reply in [] if teacher is None else list(teacher):  # a cut-state start
            if episode.done or len(state.mask) >= self.response_length:
                break
            ids = self.tokenizer.encode(str(reply), add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            span = await self._merge_reply(state, ids, [0.0] * len(ids))
            state.prefix_spans.append(span)
            messages = await self._merge_user(episode, state, messages, str(reply))
        request_id = uuid4().hex
        while not episode.done and len(state.mask) < self.response_length:
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=state.tokens, sampling_params=sampling_params
            )
            state.spans.append(await self._merge_reply(state, output.token_ids, output.log_probs))
            reply = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            messages = await self._merge_user(episode, state, messages, reply)
        return self._output(episode, state)

    async def _merge_reply(
        self, state: _State, token_ids: list[int], logprobs: list[float] | None
    ) -> list[int]:
        """Append reply tokens (response mask 1); returns their response span."""
        if not logprobs:
            state.logprobs = None
        start = len(state.mask)
        merged, state.mask, state.logprobs = await self.ct_merge_assistant_token(
            state.tokens, token_ids, state.mask, state.logprobs, assistant_logprobs=logprobs or None
        )
        state.tokens = list(merged.token_ids)
        return [start, min(len(state.mask), self.response_length)]

    async def _merge_user(
        self, episode: TextEpisode, state: _State, messages: list[dict], reply: str
    ) -> list[dict]:
        """Step the episode with ``reply`` and append the next user turn (response mask 0)."""
        user = episode.reply(reply)
        if user is None or len(state.mask) >= self.response_length:
            return messages
        before = [*messages, {"role": "assistant", "content": reply}]
        after = [*before, {"role": "user", "content": user}]
        merged, state.mask, state.logprobs = await self.ct_merge_context_msg(
            before, after, state.tokens, state.mask, state.logprobs
        )
        state.tokens = list(merged.token_ids)
        return after

    def _output(self, episode: TextEpisode, state: _State) -> AgentLoopOutput:
        n = len(state.mask)
        response = state.tokens[len(state.tokens) - n :] if n else []
        prompt = state.tokens[: len(state.tokens) - n]
        limit = self.response_length
        first = len(state.prefix_spans)
        steps = episode.steps[first : first + len(state.spans)]
        return AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response[:limit],
            response_mask=state.mask[:limit],
            response_logprobs=state.logprobs[:limit] if state.logprobs else None,
            reward_score=float(episode.reward),
            num_turns=1 + 2 * (first + len(state.spans)),
            metrics=AgentLoopMetrics(),
            extra_fields={
                "agentenvs_turn_spans": state.spans,
                "agentenvs_anchors": [s.anchor for s in steps],
                "agentenvs_actions": [s.action for s in steps],
                "agentenvs_step_rewards": [s.reward for s in steps],
                "agentenvs_format_valid": [s.format_valid for s in steps],
                "agentenvs_invalid_penalty": float(episode.invalid_penalty),
                "agentenvs_protocol": episode.protocol or NO_PROTOCOL,
                "agentenvs_prefix_spans": state.prefix_spans,
                "agentenvs_won": bool(episode.won),
                "agentenvs_task_id": str(episode.task_id),
            },
        )


class _State:
    """The running token sequence of one episode and its response metadata."""

    def __init__(self, prompt_ids: list[int]) -> None:
        self.tokens: list[int] = list(prompt_ids)
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.spans: list[list[int]] = []
        self.prefix_spans: list[list[int]] = []
