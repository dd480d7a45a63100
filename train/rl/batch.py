"""Episodes -> per-step training rows -> rewards and advantages -> padded tensors.

One row is one generated reply (one step of one episode), as :mod:`agentenvs.train.advantages`
expects: its prompt tokens (the conversation the policy saw, rendered with the chat template exactly
as the transformers backend renders it), its reply tokens and the rollout engine's log-probs of
them, the step reward, and what GiGPO and PTGPO group by: the group id (the k episodes of one
start), the episode id, the step index, the anchor observation and the parsed action (a reply
without a parseable action has the action ``<invalid format>``; one a protocol projected has the
projected action), the episode's outcome (won) and, where the environment gives one, the expert's
step credit ``info["step_credit"]`` (the oracle control's input; a reply that was not stepped,
unparseable, changed nothing and has credit 0). The invalid-action penalty is subtracted from the
reward of every reply that broke the format (unparseable, or projected with
``info["format_error"]``). The first row of an episode that started at a Prefix-GRPO query carries
the query's prefix sidecar: the prefix tokens are in its prompt, and they get the prefix loss once
per episode.

Episodes that ended on an error are left out (counted); the rest of their group still forms
the group. Tensors (:func:`collate`): prompts left-padded to P, replies right-padded to L, the
sequence [prompt | reply] with position ids counted from each row's first real token (as the
backend generates), so the reply of every row sits in columns P .. P + L - 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentenvs.train.advantages import AdvantageBatch, get_advantage_estimator
from agentenvs.train.losses import dynamic_sampling_mask, overlong_penalty
from agentenvs.train.prefix_loss import PrefixBatch, family_lift
from agentenvs.train.rl.rollout import Episode
from agentenvs.train.rl.starts import QueryStart

__all__ = [
    "INVALID_ACTION",
    "StepRow",
    "build_rows",
    "collate",
    "compute_advantages",
    "dynamic_sampling_filter",
    "prompt_token_ids",
]

INVALID_ACTION = "<invalid format>"


@dataclass
class StepRow:
    """One reply as a training row (see the module docstring)."""

    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    reward: float
    group_id: str
    episode_id: str
    step_index: int
    anchor: str
    action: str
    episode_won: bool
    episode_reward: float
    step_credit: float | None = None
    """The expert's credit of the action (``info["step_credit"]``); None: none given."""
    prefix: dict[str, Any] | None = None
    query_id: str | None = None
    family_id: str | None = None
    is_raw_query: bool = False
    # filled by the later steps
    advantages: torch.Tensor | None = None
    """(len(response_ids),) the advantage of each reply token."""
    old_log_probs: torch.Tensor | None = None
    """(len(response_ids),) the trainer's log-probs before the update."""
    correction: tuple[torch.Tensor, torch.Tensor] | None = None
    """(weights, keep) per reply token from TIS/MIS (None: no correction)."""

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def prompt_token_ids(
    tokenizer: Any, messages: Sequence[dict[str, str]], chat_template_kwargs: dict[str, Any]
) -> list[int]:
    """The prompt tokens the transformers backend generates from (same rendering)."""
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True, **chat_template_kwargs
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_rows(
    episodes: Sequence[Episode],
    tokenizer: Any,
    *,
    chat_template_kwargs: dict[str, Any] | None = None,
    invalid_penalty: float = 0.0,
    overlong: tuple[int, int, float] | None = None,
) -> tuple[list[StepRow], dict[str, float]]:
    """Rows of every episode without an error, and rollout metrics over all episodes.

    ``overlong`` = (max_new_tokens, buffer, factor): DAPO's soft overlong penalty per reply.
    """
    kwargs = dict(chat_template_kwargs or {})
    rows: list[StepRow] = []
    for ep in episodes:
        if ep.error is not None:
            continue
        rows.extend(_episode_rows(ep, tokenizer, kwargs, invalid_penalty, overlong))
    return rows, episode_metrics(episodes)


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Reward, success, turns and reply lengths over the episodes (errors counted apart)."""
    ok = [ep for ep in episodes if ep.error is None]
    n = max(len(ok), 1)
    replies = [len(s.token_ids or ()) for ep in ok for s in ep.trajectory.steps]
    invalid = sum(1 for ep in ok for s in ep.trajectory.steps if _format_invalid(s))
    by_kind: dict[str, list[bool]] = {}
    for ep in ok:
        if isinstance(ep.start, QueryStart):
            kind = "raw_query" if ep.start.is_raw else "prefix_query"
            by_kind.setdefault(kind, []).append(ep.trajectory.won)
    kinds = {f"rollout/success_rate_{k}": sum(v) / len(v) for k, v in sorted(by_kind.items())}
    return {
        **kinds,
        "rollout/episodes": float(len(episodes)),
        "rollout/error_episodes": float(len(episodes) - len(ok)),
        "rollout/reward_mean": sum(ep.trajectory.total_reward for ep in ok) / n,
        "rollout/success_rate": sum(ep.trajectory.won for ep in ok) / n,
        "rollout/turns_mean": sum(ep.trajectory.turns for ep in ok) / n,
        "rollout/truncated_frac": sum(ep.trajectory.truncated for ep in ok) / n,
        "rollout/response_tokens_per_turn": sum(replies) / max(len(replies), 1),
        "rollout/response_tokens_per_episode": sum(replies) / n,
        "rollout/invalid_format_frac": invalid / max(len(replies), 1),
    }


def _format_invalid(step: Any) -> bool:
    """A reply that broke the prompt's format: unparseable (not stepped), or projected to an
    action that was stepped anyway (a protocol's ``info["format_error"]``, verl-agent's
    ``is_action_valid == 0``). The invalid-action penalty applies to both."""
    return step.action is None or bool(step.info.get("format_error"))


def _episode_rows(ep, tokenizer, kwargs, invalid_penalty, overlong) -> list[StepRow]:
    traj = ep.trajectory
    start = ep.start
    query = start if isinstance(start, QueryStart) else None
    rows = []
    for t, step in enumerate(traj.steps):
        if step.token_ids is None:
            raise ValueError(
                f"episode {ep.episode_id} step {t} has no token ids: RL needs a policy backend "
                "that returns the generated tokens and their log-probs (hf:, vllm:)"
            )
        prompt = prompt_token_ids(tokenizer, ep.step_prompt(t), kwargs)
        prefix = None
        if query is not None and t == 0:
            if tuple(prompt) != query.prompt_token_ids:
                raise ValueError(
                    f"query {query.query_id}: the prompt rendered for training differs from the "
                    "sample's prompt_token_ids; the sidecar was made with another tokenizer or "
                    "chat template (rerun 'agentenvs replay sidecar' with this model)"
                )
            if query.sidecar["prefix_token_count"] > 0:
                prefix = query.sidecar
        reward = float(step.reward)
        if _format_invalid(step):
            reward -= invalid_penalty
        if overlong is not None:
            max_len, buffer, factor = overlong
            reward += float(
                overlong_penalty(
                    torch.tensor([len(step.token_ids)]),
                    max_length=max_len,
                    buffer_length=buffer,
                    penalty_factor=factor,
                )[0]
            )
        logprobs = step.logprobs if step.logprobs is not None else [0.0] * len(step.token_ids)
        rows.append(
            StepRow(
                prompt_ids=prompt,
                response_ids=list(step.token_ids),
                rollout_log_probs=[float(x) for x in logprobs],
                reward=reward,
                group_id=ep.group_id,
                episode_id=ep.episode_id,
                step_index=t,
                anchor=step.anchor,
                action=step.action if step.action is not None else INVALID_ACTION,
                episode_won=bool(traj.won),
                episode_reward=float(traj.total_reward),
                step_credit=_step_credit(step),
                prefix=prefix,
                query_id=query.query_id if query else None,
                family_id=query.family_id if query else None,
                is_raw_query=bool(query and query.is_raw),
            )
        )
    return rows


UNSTEPPED_REPLY_CREDIT = -1.0
"""The credit of a reply the environment never stepped (unparseable). ``info["step_credit"]``
counts minus the turns an action adds to the shortest possible episode, and such a reply spends
one turn and changes nothing. A credit of 0 would make a broken reply cheaper than any action
that is not on a shortest plan, and the oracle arm then learns to break its replies."""


def _step_credit(step: Any) -> float | None:
    """``info["step_credit"]`` of a stepped reply; :data:`UNSTEPPED_REPLY_CREDIT` for one the
    environment never saw; None when the environment gives no credit."""
    if step.action is None:
        return UNSTEPPED_REPLY_CREDIT
    credit = step.info.get("step_credit")
    return None if credit is None else float(credit)


def dynamic_sampling_filter(rows: Sequence[StepRow]) -> tuple[list[str], dict[str, float]]:
    """DAPO: the group ids whose episodes' rewards are not all equal, in batch order."""
    if not rows:
        return [], {"dapo/kept_group_frac": 0.0}
    episodes: dict[str, tuple[str, float]] = {}
    for row in rows:
        episodes.setdefault(row.episode_id, (row.group_id, row.episode_reward))
    groups = [g for g, _ in episodes.values()]
    keep, metrics = dynamic_sampling_mask(torch.tensor([r for _, r in episodes.values()]), groups)
    kept = list(dict.fromkeys(g for g, k in zip(groups, keep.tolist(), strict=True) if k))
    return kept, metrics


def compute_advantages(
    rows: Sequence[StepRow], estimator_name: str, settings: dict[str, Any]
) -> dict[str, float]:
    """Run the registered estimator over ``rows``; sets ``row.advantages``; returns metrics."""
    estimator = get_advantage_estimator(estimator_name)
    lengths = [len(r.response_ids) for r in rows]
    mask = torch.zeros(len(rows), max(lengths))
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    batch = AdvantageBatch(
        rewards=torch.tensor([r.reward for r in rows], dtype=torch.float32),
        response_mask=mask,
        group_index=[r.group_id for r in rows],
        episode_index=[r.episode_id for r in rows],
        step_index=[r.step_index for r in rows],
        anchors=[r.anchor for r in rows],
        actions=[r.action for r in rows],
        step_credits=_step_credits(rows, required="step_credits" in estimator.requires),
        outcomes=[float(r.episode_won) for r in rows],
    )
    result = estimator(batch, estimator.make_config(**settings))
    for i, row in enumerate(rows):
        row.advantages = result.token_advantages[i, : lengths[i]].clone()
    adv = result.step_advantages
    metrics = {
        "adv/mean": float(adv.mean()),
        "adv/std": float(adv.std()) if len(rows) > 1 else 0.0,
        "adv/abs_mean": float(adv.abs().mean()),
        "adv/zero_frac": float((adv == 0).float().mean()),
        "adv/return_mean": float(result.returns.mean()),
    }
    metrics.update(result.metrics)
    return metrics


def _step_credits(rows: Sequence[StepRow], *, required: bool) -> list[float] | None:
    """Every row's step credit; None when a row has none, which is an error naming the row when
    the estimator needs them (the oracle)."""
    missing = next((r for r in rows if r.step_credit is None), None)
    if missing is None:
        return [float(r.step_credit) for r in rows]  # type: ignore[arg-type]
    if required:
        raise ValueError(
            f"the oracle advantage needs the expert's credit of every step: episode "
            f"{missing.episode_id} step {missing.step_index} (action {missing.action!r}) has no "
            "info['step_credit']; train it on an environment (or wrapper) that puts the credit "
            "in each step's info, such as the learning benchmark's"
        )
    return None


def prefix_lift(rows: Sequence[StepRow]) -> torch.Tensor:
    """(B,) each row's family lift (``family_lift`` mode): mean reward of its query minus that
    of the raw query cut from the same teacher trajectory (0 on raw rows)."""
    first = [r for r in rows if r.step_index == 0]
    lift = family_lift(
        [r.episode_reward for r in first],
        [r.query_id for r in first],
        [r.family_id for r in first],
        [r.is_raw_query for r in first],
    )
    by_episode = {r.episode_id: float(v) for r, v in zip(first, lift.tolist(), strict=True)}
    return torch.tensor([by_episode[r.episode_id] for r in rows])


def collate(rows: Sequence[StepRow], pad_id: int, device: torch.device) -> dict[str, Any]:
    """Padded tensors of ``rows`` (module docstring); ``prefix`` is None without sidecars."""
    width_p = max(len(r.prompt_ids) for r in rows)
    width_l = max(len(r.response_ids) for r in rows)
    n = len(rows)
    input_ids = torch.full((n, width_p + width_l), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width_p + width_l), dtype=torch.long)
    response_mask = torch.zeros((n, width_l))
    old = torch.zeros((n, width_l))
    rollout = torch.zeros((n, width_l))
    advantages = torch.zeros((n, width_l))
    for i, r in enumerate(rows):
        p, m = len(r.prompt_ids), len(r.response_ids)
        input_ids[i, width_p - p : width_p] = torch.tensor(r.prompt_ids)
        input_ids[i, width_p : width_p + m] = torch.tensor(r.response_ids)
        attention[i, width_p - p : width_p + m] = 1
        response_mask[i, :m] = 1.0
        rollout[i, :m] = torch.tensor(r.rollout_log_probs)
        if r.old_log_probs is not None:
            old[i, :m] = r.old_log_probs
        if r.advantages is not None:
            advantages[i, :m] = r.advantages
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    prefix = None
    if any(r.prefix is not None for r in rows):
        prefix = PrefixBatch.from_sidecars([r.prefix for r in rows]).to(device)
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention.to(device),
        "position_ids": position_ids.to(device),
        "prompt_width": width_p,
        "response_mask": response_mask.to(device),
        "old_log_probs": old.to(device),
        "rollout_log_probs": rollout.to(device),
        "advantages": advantages.to(device),
        "prefix": prefix,
    }
