"""Advantage estimators: hand-computed cases, the PTGPO worked example, identities, and the
registered (vectorised) estimators against the plain reference functions."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentenvs.train.advantages import (  # noqa: E402
    AdvantageBatch,
    GiGPOConfig,
    GRPOConfig,
    PTGPOConfig,
    advantage_estimator_names,
    get_advantage_estimator,
    gigpo_advantages,
    ptgpo_advantages,
    ptgpo_path_credits,
    register_advantage_estimator,
)

SQRT3 = math.sqrt(3.0)


WORKED_EXAMPLE = [
    [("s0", "a", 0.0), ("s1", "b", 0.0), ("s2", "c", 1.0)],
    [("s0", "a", 0.0), ("s1", "b", 0.0), ("s2", "d", 0.0)],
    [("s0", "a", 0.0), ("s1", "e", 0.0), ("s3", "f", 0.0)],
    [("s0", "g", 0.0), ("s4", "h", 1.0)],
]
# The PTGPO paper's worked example, hand-computed (gamma 1, tau_expand 2, D unbounded, omega 1,
# eps -> 0).
WORKED_EXAMPLE_ADVANTAGES = [
    [0.5774, 1.4434, 3.3052],
    [-1.1547, -0.2887, -3.3052],
    [-1.1547, -2.0207, -0.8660],
    [1.7321, 0.8660],
]


def random_groups(
    seed: int,
    *,
    n_groups: int = 3,
    n_episodes: int = 6,
    max_len: int = 7,
    n_anchors: int = 3,
    n_actions: int = 2,
) -> list[list[list[tuple[str, str, float]]]]:
    """Groups of episodes with few anchors and actions, so anchor groups and shared action
    prefixes are common; anchor strings repeat across groups (which must not merge them)."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_groups):
        episodes = []
        for _ in range(n_episodes):
            length = int(rng.integers(1, max_len + 1))
            episodes.append(
                [
                    (
                        f"s{rng.integers(n_anchors)}",
                        f"a{rng.integers(n_actions)}",
                        float(rng.choice([0.0, 0.0, 0.0, 1.0, 0.5, -0.1])),
                    )
                    for _ in range(length)
                ]
            )
        groups.append(episodes)
    return groups


def history_group(seed: int, *, n_episodes: int = 8, max_len: int = 5):
    """One group from a deterministic environment whose state is the action history: the anchor
    is the history so far, rewards and the episode end depend only on the history, so two steps
    with the same anchor and the same following actions have the same return."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n_episodes):
        history: list[str] = []
        episode = []
        for t in range(max_len):
            action = str(rng.choice(["x", "y", "stop"], p=[0.5, 0.35, 0.15]))
            anchor = "/".join(history)
            history.append(action)
            reward = 1.0 if history[-2:] == ["x", "y"] else (0.5 if action == "stop" else 0.0)
            episode.append((anchor, action, reward))
            if action == "stop" or t == max_len - 1:
                break
        episodes.append(episode)
    return episodes


def run(name, batch, **settings):
    estimator = get_advantage_estimator(name)
    return estimator(batch, estimator.make_config(**settings))


def shuffled(batch: AdvantageBatch, seed: int) -> tuple[AdvantageBatch, np.ndarray]:
    """The same rows in a random order, with string group ids; also the permutation."""
    order = np.random.default_rng(seed).permutation(batch.rewards.shape[0])

    def pick(values):
        return [values[i] for i in order]

    return (
        AdvantageBatch(
            rewards=batch.rewards[torch.as_tensor(order)],
            response_mask=batch.response_mask[torch.as_tensor(order)],
            group_index=[f"task-{g}" for g in pick(batch.group_index)],
            episode_index=pick(batch.episode_index),
            step_index=pick(batch.step_index),
            anchors=pick(batch.anchors),
            actions=pick(batch.actions),
        ),
        order,
    )


def flat(per_group):
    """[group][episode][step] values in the row order of AdvantageBatch.from_groups."""
    return [v for episodes in per_group for episode in episodes for v in episode]


# ------------------------------------------------------------------------------ registry


def test_registry_lists_every_estimator():
    assert advantage_estimator_names() == ["dr_grpo", "gigpo", "grpo", "oracle", "ptgpo"]
    assert get_advantage_estimator("oracle").requires == ("step_credits",)
    assert get_advantage_estimator("ptgpo").requires == ("anchors", "actions")
    assert get_advantage_estimator("gigpo").requires == ("anchors",)
    assert get_advantage_estimator("grpo").requires == ()


def test_duplicate_and_bad_registrations_are_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register_advantage_estimator("grpo", config_type=GRPOConfig)(lambda b, c: None)
    with pytest.raises(ValueError, match="unknown batch input"):
        register_advantage_estimator("x", config_type=GRPOConfig, requires=("states",))


def test_unknown_name_lists_choices_and_suggests():
    with pytest.raises(ValueError, match="Did you mean 'grpo'") as info:
        get_advantage_estimator("gpro")
    assert "ptgpo" in str(info.value)


def test_config_errors_name_the_valid_settings():
    with pytest.raises(TypeError, match="valid settings"):
        get_advantage_estimator("gigpo").make_config(gama=0.9)
    batch = AdvantageBatch(torch.zeros(2), torch.ones(2, 1), [0, 0])
    with pytest.raises(TypeError, match="takes a GRPOConfig"):
        get_advantage_estimator("grpo")(batch, PTGPOConfig())
    with pytest.raises(ValueError, match="normalize"):
        GiGPOConfig(normalize="whiten")
    with pytest.raises(ValueError, match="tau_expand"):
        PTGPOConfig(tau_expand=0)
    with pytest.raises(ValueError, match="gamma"):
        PTGPOConfig(gamma=1.5)


def test_missing_step_inputs_are_a_clear_error():
    batch = AdvantageBatch(torch.zeros(2), torch.ones(2, 1), [0, 0], anchors=["s", "s"])
    with pytest.raises(ValueError, match=r"needs AdvantageBatch field\(s\) \['actions'\]"):
        run("ptgpo", batch)
    with pytest.raises(ValueError, match="anchors"):
        run("gigpo", AdvantageBatch(torch.zeros(2), torch.ones(2, 1), [0, 0]))


def test_batch_validation():
    with pytest.raises(ValueError, match="no rows"):
        AdvantageBatch(torch.zeros(0), torch.ones(0, 2), [])
    with pytest.raises(ValueError, match="one entry per row"):
        AdvantageBatch(torch.zeros(3), torch.ones(3, 2), [0, 0])
    with pytest.raises(ValueError, match="response_mask"):
        AdvantageBatch(torch.zeros(3), torch.ones(2, 2), [0, 0, 0])
    gap = AdvantageBatch(
        torch.zeros(2), torch.ones(2, 1), [0, 0], episode_index=[0, 0], step_index=[0, 2]
    )
    with pytest.raises(ValueError, match="0 .. T-1"):
        run("grpo", gap)
    twice = AdvantageBatch(
        torch.zeros(3), torch.ones(3, 1), [0, 0, 0], episode_index=[0, 0, 0], step_index=[0, 1, 1]
    )
    with pytest.raises(ValueError, match="0 .. T-1|same step_index"):
        run("grpo", twice)


# ------------------------------------------------------------------------------ GRPO


def test_grpo_and_dr_grpo_hand_computed():
    mask = torch.tensor(
        [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0], [1, 0, 0]],
        dtype=torch.float32,
    )
    batch = AdvantageBatch(torch.tensor([1.0, 0, 0, 1, 1, 1, 0]), mask, list("aaaabbb"))
    grpo = run("grpo", batch, eps=0.0)
    # group a: mean 1/2, std sqrt(1/3); group b: mean 2/3, std sqrt(1/3)
    expected = [SQRT3 / 2, -SQRT3 / 2, -SQRT3 / 2, SQRT3 / 2, 1 / SQRT3, 1 / SQRT3, -2 / SQRT3]
    assert grpo.step_advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(grpo.token_advantages, grpo.step_advantages[:, None] * mask)
    dr = run("dr_grpo", batch)
    assert dr.step_advantages.tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5, 1 / 3, 1 / 3, -2 / 3], abs=1e-6
    )


def test_grpo_with_one_sample_per_group_gives_zero():
    batch = AdvantageBatch(torch.tensor([1.0, 0.0, 0.5]), torch.ones(3, 4), ["a", "b", "c"])
    for name in ("grpo", "dr_grpo"):
        result = run(name, batch)
        assert torch.isfinite(result.token_advantages).all()
        assert result.step_advantages.tolist() == [0.0, 0.0, 0.0]
    assert run("grpo", batch).metrics["adv/zero_std_group_frac"] == 1.0


def test_grpo_multi_turn_rows_share_the_episode_advantage():
    # two episodes of one task: rewards (0, 0, 1) and (0, 0.5); R = 1 and 0.5
    batch = AdvantageBatch(
        torch.tensor([0.0, 1.0, 0.0, 0.5, 0.0]),
        torch.ones(5, 2),
        [7] * 5,
        episode_index=["e1", "e1", "e2", "e2", "e1"],
        step_index=[0, 2, 0, 1, 1],
    )
    result = run("dr_grpo", batch)
    assert result.step_advantages.tolist() == pytest.approx([0.25, 0.25, -0.25, -0.25, 0.25])
    assert result.returns.tolist() == pytest.approx([1.0, 1.0, 0.5, 0.5, 1.0])


# ------------------------------------------------------------------------------ GiGPO

GIGPO_GROUP = [
    [("s0", "a", 0.0), ("s1", "b", 1.0)],
    [("s0", "a", 0.0), ("s2", "c", 0.0)],
    [("s0", "d", 1.0)],
]


def test_gigpo_hand_computed_mean_norm():
    # gamma 0.5: returns (0.5, 1), (0, 0), (1); R = 1, 0, 1 (mean 2/3); anchor s0: 0.5, 0, 1
    expected = [[1 / 3, 1 / 3], [-2 / 3 - 0.5, -2 / 3], [1 / 3 + 0.5]]
    got = gigpo_advantages(GIGPO_GROUP, gamma=0.5, normalize="mean")
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want)
    result = run("gigpo", AdvantageBatch.from_groups([GIGPO_GROUP]), gamma=0.5)
    assert result.step_advantages.tolist() == pytest.approx(flat([expected]), abs=1e-6)
    assert result.returns.tolist() == pytest.approx([0.5, 1.0, 0.0, 0.0, 1.0])


def test_gigpo_hand_computed_mean_std_and_weight():
    # episode std sqrt(1/3); anchor s0 returns (0.5, 0, 1): std 0.5; singletons get 0
    ep = [1 / SQRT3, -2 / SQRT3, 1 / SQRT3]
    step_weight = 2.0
    expected = [[ep[0], ep[0]], [ep[1] - step_weight, ep[1]], [ep[2] + step_weight]]
    got = gigpo_advantages(GIGPO_GROUP, gamma=0.5, normalize="std", step_weight=2.0, eps=0.0)
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want)
    batch = AdvantageBatch.from_groups([GIGPO_GROUP])
    result = run("gigpo", batch, gamma=0.5, normalize="std", step_weight=2.0, eps=0.0)
    assert result.step_advantages.tolist() == pytest.approx(flat([expected]), abs=1e-6)


# ------------------------------------------------------------------------------ PTGPO


def test_ptgpo_worked_example_to_four_decimals():
    episodes, table = WORKED_EXAMPLE, WORKED_EXAMPLE_ADVANTAGES
    reference = ptgpo_advantages(episodes, gamma=1.0, tau_expand=2, max_depth=None, eps=0.0)
    assert [[round(v, 4) for v in row] for row in reference] == table
    batch, order = shuffled(AdvantageBatch.from_groups([episodes]), seed=3)
    result = run("ptgpo", batch, gamma=1.0, tau_expand=2, eps=0.0)
    got = result.step_advantages.numpy()
    expected = np.array(flat([table]))[order]
    assert np.round(got.astype(np.float64), 4).tolist() == pytest.approx(expected.tolist(), abs=0)
    assert result.metrics["adv/tree_depth_max"] == 3.0


def test_ptgpo_worked_example_edge_credits():
    episodes = WORKED_EXAMPLE
    credits = ptgpo_path_credits(episodes)
    assert credits[0][0] == pytest.approx([-1 / 6, 1 / 6, 0.5])  # a, a-b, a-b-c
    assert credits[2][0] == pytest.approx([-1 / 6, -1 / 3])  # a, a-e (a-e not expanded)
    assert credits[3][0] == pytest.approx([0.5])  # g (singleton, not expanded)
    assert credits[1][2] == pytest.approx([-0.5])  # root s2: (1, 0), child d
    assert credits[2][2] == [] and credits[3][1] == []  # singleton roots s3, s4


def test_ptgpo_telescoping_identity():
    # Fully expanded paths: credits along (i, t)'s path sum to G_t - mu(root).
    for seed in range(6):
        episodes = history_group(seed)
        for gamma in (1.0, 0.9):
            credits = ptgpo_path_credits(episodes, gamma=gamma, tau_expand=1, max_depth=None)
            returns = [_returns(ep, gamma) for ep in episodes]
            roots = defaultdict(list)
            for i, ep in enumerate(episodes):
                for t, (anchor, _, _) in enumerate(ep):
                    roots[anchor].append(returns[i][t])
            for i, ep in enumerate(episodes):
                for t, (anchor, _, _) in enumerate(ep):
                    root_mean = sum(roots[anchor]) / len(roots[anchor])
                    assert len(credits[i][t]) == len(ep) - t  # expanded to the episode's end
                    assert sum(credits[i][t]) == pytest.approx(returns[i][t] - root_mean)


def test_ptgpo_telescoping_holds_for_the_default_tau():
    # tau_expand = 2 stops at singleton nodes, whose remainder G - mu(node) is 0.
    episodes = history_group(11)
    tau1 = ptgpo_advantages(episodes, tau_expand=1)
    tau2 = ptgpo_advantages(episodes, tau_expand=2)
    for a, b in zip(tau1, tau2, strict=True):
        assert a == pytest.approx(b)


def test_ptgpo_depth_one_is_gigpo_decomposition():
    # D = 1: A^PT(i, t) = mean over (i, t)'s child (same anchor, same action) of GiGPO's
    # mean-std step advantage, since G - mu(root) = delta_0 + (G - mu(child)).
    for episodes in random_groups(5, n_groups=4):
        pt = ptgpo_advantages(episodes, gamma=0.9, max_depth=1)
        pt_ep = ptgpo_advantages(episodes, gamma=0.9, max_depth=1, step_weight=0.0)
        gi = gigpo_advantages(episodes, gamma=0.9, normalize="std")
        gi_ep = gigpo_advantages(episodes, gamma=0.9, normalize="std", step_weight=0.0)
        children = defaultdict(list)
        for i, ep in enumerate(episodes):
            for t, (anchor, action, _) in enumerate(ep):
                children[anchor, action].append(gi[i][t] - gi_ep[i][t])
        for i, ep in enumerate(episodes):
            assert pt_ep[i] == pytest.approx(gi_ep[i])  # same GRPO episode term
            for t, (anchor, action, _) in enumerate(ep):
                child = children[anchor, action]
                assert pt[i][t] - pt_ep[i][t] == pytest.approx(sum(child) / len(child))


def test_ptgpo_depth_one_equals_gigpo_when_return_follows_the_action():
    # gamma 0 and r_t a function of (anchor, action): every child has one return, so the
    # remainder is 0 and PTGPO with D = 1 is exactly GiGPO (mean-std).
    rng = np.random.default_rng(2)
    table = {(s, a): float(rng.integers(0, 3)) for s in "pqr" for a in "xyz"}
    episodes = []
    for _ in range(7):
        steps = [(str(rng.choice(list("pqr"))), str(rng.choice(list("xyz")))) for _ in range(4)]
        episodes.append([(s, a, table[s, a]) for s, a in steps])
    pt = ptgpo_advantages(episodes, gamma=0.0, max_depth=1)
    gi = gigpo_advantages(episodes, gamma=0.0, normalize="std")
    for a, b in zip(pt, gi, strict=True):
        assert a == pytest.approx(b)


def test_ptgpo_depth_zero_is_grpo():
    episodes = random_groups(8, n_groups=1)[0]
    no_tree = ptgpo_advantages(episodes, max_depth=0)
    episode_only = ptgpo_advantages(episodes, step_weight=0.0)
    assert no_tree == episode_only


def test_ptgpo_single_episode_gives_zero():
    episode = [[("s", "a", 0.0), ("s", "b", 0.0), ("t", "a", 1.0)]]
    assert ptgpo_advantages(episode) == [[0.0, 0.0, 0.0]]
    result = run("ptgpo", AdvantageBatch.from_groups([episode]))
    assert result.step_advantages.tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------- vectorised vs reference

PTGPO_SETTINGS = [
    {},
    {"gamma": 0.9, "tau_expand": 3},
    {"gamma": 0.95, "max_depth": 2, "step_weight": 0.5},
    {"tau_expand": 1, "max_depth": 1},
    {"gamma": 0.5, "eps": 0.0},
]


@pytest.mark.parametrize("settings", PTGPO_SETTINGS)
def test_ptgpo_estimator_matches_reference(settings):
    for seed in range(4):
        groups = random_groups(seed, n_groups=3, n_episodes=6, max_len=8)
        expected = flat([ptgpo_advantages(episodes, **settings) for episodes in groups])
        batch, order = shuffled(AdvantageBatch.from_groups(groups), seed)
        got = run("ptgpo", batch, **settings).step_advantages
        assert got.tolist() == pytest.approx(np.array(expected)[order].tolist(), abs=1e-5)


def test_ptgpo_estimator_matches_reference_with_many_distinct_actions():
    # many distinct action strings: the per-level grouping takes its dict path
    groups = random_groups(9, n_groups=2, n_episodes=12, n_anchors=2, n_actions=400)
    expected = flat([ptgpo_advantages(episodes, tau_expand=1) for episodes in groups])
    got = run("ptgpo", AdvantageBatch.from_groups(groups), tau_expand=1).step_advantages
    assert got.tolist() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("settings", [{}, {"normalize": "std"}, {"gamma": 1.0, "step_weight": 0.3}])
def test_gigpo_estimator_matches_reference(settings):
    for seed in range(4):
        groups = random_groups(100 + seed, n_groups=4)
        expected = flat([gigpo_advantages(episodes, **settings) for episodes in groups])
        batch, order = shuffled(AdvantageBatch.from_groups(groups), seed)
        got = run("gigpo", batch, **settings).step_advantages
        assert got.tolist() == pytest.approx(np.array(expected)[order].tolist(), abs=1e-5)


def test_groups_with_equal_anchor_strings_stay_apart():
    one = [[("s", "a", 1.0)], [("s", "b", 0.0)]]
    apart = run("ptgpo", AdvantageBatch.from_groups([one, one])).step_advantages
    alone = run("ptgpo", AdvantageBatch.from_groups([one])).step_advantages
    assert apart.tolist() == pytest.approx(alone.tolist() * 2)


def _returns(episode, gamma):
    out, running = [], 0.0
    for _, _, reward in reversed(episode):
        running = reward + gamma * running
        out.append(running)
    return out[::-1]


# ----------------------------------------------------------------- diagnostics (metrics)


def test_ptgpo_metrics_on_the_worked_example():
    # roots: s0 (4 steps), s1 (3), s2 (2), s3 and s4 alone: 9 of 11 steps grouped
    # trees (>= tau_expand 2 members): s0, s1, s2. Level 0 splits all three in two (a|g, b|e,
    # c|d); level 1 splits s0/a (b|e) and s1/b (c|d); level 2 splits s0/a/b (c|d): 6 expanded
    # nodes, 12 children, every expanded node split; 9 + 5 + 2 credited edges
    metrics = run("ptgpo", AdvantageBatch.from_groups([WORKED_EXAMPLE]), gamma=1.0).metrics
    assert metrics["adv/grouped_step_frac"] == pytest.approx(9 / 11)
    assert metrics["adv/singleton_step_frac"] == pytest.approx(2 / 11)
    assert metrics["adv/step_group_size_mean"] == pytest.approx(11 / 5)
    assert metrics["adv/step_group_zero_spread_frac"] == 0.0
    assert metrics["adv/zero_std_group_frac"] == 0.0 and metrics["adv/group_size_mean"] == 4.0
    assert metrics["adv/trees"] == 3.0 and metrics["adv/tree_depth_max"] == 3.0
    assert metrics["adv/tree_nodes"] == 12.0 and metrics["adv/tree_credits"] == 16.0
    assert metrics["adv/tree_nodes_per_tree"] == 4.0
    assert metrics["adv/tree_branching"] == 2.0 and metrics["adv/tree_split_frac"] == 1.0
    # A^PT = A - A_episode: zero only at episode 3's t=2 (s3) and episode 4's t=1 (s4)
    assert metrics["adv/step_credit_nonzero_frac"] == pytest.approx(9 / 11)
    episode = [SQRT3 / 2, -SQRT3 / 2, -SQRT3 / 2, SQRT3 / 2]  # (R - 1/2) / sqrt(1/3)
    tree = [a - e for row, e in zip(WORKED_EXAMPLE_ADVANTAGES, episode, strict=True) for a in row]
    assert metrics["adv/step_credit_abs_mean"] == pytest.approx(
        sum(abs(v) for v in tree) / 11, abs=1e-3
    )


def test_zero_spread_and_unsplit_trees_are_counted():
    # group 0: two identical episodes (no reward spread, flat anchor groups, trees that never
    # split); group 1: one shared step, then different actions and rewards
    same = [("s", "a", 0.0), ("t", "b", 1.0)]
    groups = [
        [same, same],
        [[("s", "a", 0.0), ("u", "c", 1.0)], [("s", "a", 0.0), ("v", "d", 0.0)]],
    ]
    batch = AdvantageBatch.from_groups(groups)
    ptgpo = run("ptgpo", batch).metrics
    assert ptgpo["adv/zero_std_group_frac"] == 0.5
    # anchor groups of >= 2: (0, s), (0, t) flat; (1, s) returns gamma * 1 and 0: not flat
    assert ptgpo["adv/step_group_zero_spread_frac"] == pytest.approx(2 / 3)
    assert ptgpo["adv/grouped_step_frac"] == pytest.approx(6 / 8)
    # trees: (0, s) -> a -> b: two unsplit nodes; (0, t) -> b: one; (1, s) -> a (unsplit) -> c|d
    assert ptgpo["adv/trees"] == 3.0
    assert ptgpo["adv/tree_nodes"] == 6.0  # a, a-b, b; a, a-c, a-d
    assert ptgpo["adv/tree_branching"] == pytest.approx(6 / 5)
    assert ptgpo["adv/tree_split_frac"] == pytest.approx(1 / 5)
    # group 0 (flat rewards) has no step credit here: its trees never split, its anchor groups
    # have equal returns; all of it is in group 1
    assert ptgpo["adv/step_credit_flat_group_share"] == 0.0
    gigpo = run("gigpo", batch).metrics
    for key in ("adv/zero_std_group_frac", "adv/step_group_zero_spread_frac"):
        assert gigpo[key] == ptgpo[key]
    assert gigpo["adv/step_credit_flat_group_share"] == 0.0
    assert "adv/trees" not in gigpo
    grpo = run("grpo", batch).metrics  # anchors given: how often states coincide, for GRPO too
    assert grpo["adv/grouped_step_frac"] == ptgpo["adv/grouped_step_frac"]
    assert "adv/step_credit_abs_mean" not in grpo


def test_step_credit_in_groups_without_reward_spread_is_counted():
    # group 0: both episodes end with reward 0 but visit s at different steps: G differs by the
    # step reward (-0.1 at t=0), so s's anchor group has a return spread and gets step credit;
    # group 1: an outcome difference at a shared anchor
    late = [("x", "w", -0.1), ("s", "a", 0.1)]
    early = [("s", "b", 0.0), ("y", "c", 0.0)]
    win, lose = [("s", "a", 1.0)], [("s", "b", 0.0)]
    batch = AdvantageBatch.from_groups([[late, early], [win, lose]])
    # gamma 1: group 0's R: 0 and 0 (flat); anchor s: G = 0.1 (late, t=1) and 0 (early, t=0)
    metrics = run("gigpo", batch, gamma=1.0).metrics
    # GiGPO mean-norm step credit: group 0 s: +-0.05 (2 rows), x, y alone: 0; group 1 s: +-0.5
    assert metrics["adv/step_credit_flat_group_share"] == pytest.approx(0.1 / 1.1)
    assert metrics["adv/step_credit_abs_mean"] == pytest.approx(1.1 / 6)
