"""The policy-loss registry: names, the prefix check, and each registered loss equal to the
function it wraps."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentenvs.train.loss_registry import (  # noqa: E402
    LossInputs,
    get_policy_loss,
    policy_loss_names,
    register_policy_loss,
)
from agentenvs.train.losses import PolicyLossConfig, policy_loss  # noqa: E402
from agentenvs.train.prefix_loss import (  # noqa: E402
    PrefixBatch,
    PrefixConfig,
    PrefixSignals,
    prefix_grpo_loss,
)
from agentenvs.train.rl.config import ALGORITHMS, RLConfig  # noqa: E402


def inputs(with_prefix: bool = True) -> LossInputs:
    prefix = PrefixBatch(
        span_start=torch.tensor([3, 0]),
        span_end=torch.tensor([5, 0]),
        mask=torch.tensor([[1.0, 1.0], [0.0, 0.0]]),
        old_log_probs=torch.tensor([[-1.0, -2.0], [0.0, 0.0]]),
    )
    return LossInputs(
        log_prob=torch.tensor([[-0.1, -0.2], [-0.3, 0.0]]),
        old_log_prob=torch.tensor([[-0.2, -0.2], [-0.1, 0.0]]),
        advantages=torch.tensor([[1.0, 1.0], [-0.5, -0.5]]),
        response_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        prefix_log_prob=torch.tensor([[-1.0 + math.log(1.1), -2.0], [0.0, 0.0]]),
        prefix=prefix if with_prefix else None,
        prefix_signals=PrefixSignals(success=torch.tensor([True, False])),
    )


def test_names_and_errors() -> None:
    assert policy_loss_names() == ["clipped", "prefix_grpo"]
    with pytest.raises(ValueError, match="Did you mean 'clipped'"):
        get_policy_loss("clippd")
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("clipped")(lambda i, p, q: None)
    with pytest.raises(ValueError, match="needs a PrefixConfig"):
        get_policy_loss("prefix_grpo")(inputs(), PolicyLossConfig())
    with pytest.raises(ValueError, match="no prefix branch"):
        get_policy_loss("clipped")(inputs(), PolicyLossConfig(), PrefixConfig())


def test_every_algorithm_names_a_registered_loss() -> None:
    for spec in ALGORITHMS.values():
        get_policy_loss(spec.loss)
    assert [n for n, s in ALGORITHMS.items() if s.prefix] == ["prefix-grpo"]


def test_every_engine_kind_has_a_policy_factory() -> None:
    from agentenvs.train.rl.config import ENGINES
    from agentenvs.train.rl.engine import POLICY_FACTORIES, policy_factory, transformers_policy

    assert sorted(POLICY_FACTORIES) == sorted(ENGINES)
    assert policy_factory(RLConfig()) is transformers_policy


def test_clipped_is_the_policy_loss() -> None:
    x = inputs()
    loss, metrics = get_policy_loss("clipped")(x, PolicyLossConfig())
    expected, _ = policy_loss(
        x.log_prob, x.old_log_prob, x.advantages, x.response_mask, PolicyLossConfig()
    )
    assert loss.item() == expected.item() and metrics["actor/total_loss"] == expected.item()


@pytest.mark.parametrize("objective", ["split", "joint"])
def test_prefix_grpo_is_the_prefix_objective(objective) -> None:
    x, config = inputs(), PrefixConfig(objective=objective, advantage_mode="success")
    loss, metrics = get_policy_loss("prefix_grpo")(x, PolicyLossConfig(), config)
    expected, want = prefix_grpo_loss(
        log_prob=x.log_prob,
        old_log_prob=x.old_log_prob,
        advantages=x.advantages,
        response_mask=x.response_mask,
        prefix_log_prob=x.prefix_log_prob,
        prefix=x.prefix,
        prefix_advantage=torch.tensor([1.0, 0.0]),  # success: constant 1 on the won row
        policy=PolicyLossConfig(),
        config=config,
    )
    assert loss.item() == expected.item() and metrics == want


def test_prefix_grpo_without_prefix_rows_is_the_clipped_loss() -> None:
    x = inputs(with_prefix=False)
    loss, _ = get_policy_loss("prefix_grpo")(x, PolicyLossConfig(), PrefixConfig())
    assert loss.item() == get_policy_loss("clipped")(x, PolicyLossConfig())[0].item()
