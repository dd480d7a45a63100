"""SkyRL-Gym: every agentenvs environment made by ``skyrl_gym.make`` and played the way SkyRL's
generator plays a text environment (``init`` with the row's prompt, then ``step`` with each raw
reply, appending the returned messages). The expert plays 3 tasks of each; every episode is won,
and the conversation is the one our own rollouts give (``run_rollouts``, same protocol)."""

from __future__ import annotations

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from agentenvs.agents.protocol_rules import ProtocolRules  # noqa: E402
from agentenvs.agents.registry import make_policy  # noqa: E402
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts  # noqa: E402
from agentenvs.expert import make_expert  # noqa: E402
from agentenvs.integrations.skyrl import AgentenvsTextEnv, dataset_rows, register  # noqa: E402

ENV_IDS = ("TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0")
EPISODES = 3  # expert episodes per environment


def _play(row: dict) -> tuple[AgentenvsTextEnv, list[dict], list[dict]]:
    """One episode as SkyRL's generator plays it, the expert writing the replies; returns the
    environment, the conversation and each step's output."""
    extras = {k: v for k, v in row.items() if k != "prompt"}
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    rules = ProtocolRules.of(row["env_class"], row["extra_info"]["protocol"])
    expert = make_expert(row["env_class"])
    expert.reset()
    messages, info = env.init(row["prompt"])
    assert info["task_id"] == row["extra_info"]["task_id"]
    outputs = []
    done = False
    while not done:
        decision = expert.act(env.episode.env.unwrapped)
        reply = rules.format_reply(decision.thought, decision.action)
        out = env.step(reply)
        messages += [{"role": "assistant", "content": reply}, *out["observations"]]
        outputs.append(out)
        done = out["done"]
    return env, messages, outputs


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_expert_wins_through_skyrl_gym_with_our_observations(env_id):
    assert env_id in register()
    rows = dataset_rows(env_id, "test", limit=EPISODES)
    assert len(rows) == EPISODES and all(r["env_class"] == env_id for r in rows)
    protocol = rows[0]["extra_info"]["protocol"]
    config = RolloutConfig(protocol=protocol)
    tasks = [r["extra_info"]["task_id"] for r in rows]
    ours = {
        t.task_id: t
        for t in run_rollouts(make_policy("expert"), env_id, plan_episodes(tasks, 1), config)
    }
    for row in rows:
        env, messages, outputs = _play(row)
        traj = ours[row["extra_info"]["task_id"]]
        assert env.episode.won and traj.won, (env_id, traj.task_id)
        assert messages == traj.messages  # our prompt, replies and observations
        assert [o["metadata"]["action"] for o in outputs] == traj.actions
        assert [o["reward"] for o in outputs] == pytest.approx([s.reward for s in traj.steps])
        assert outputs[-1]["done"] and not any(o["done"] for o in outputs[:-1])
        assert outputs[-1]["metadata"]["won"]
        assert env.get_metrics() == {"won": 1.0, "reward": traj.total_reward, "turns": traj.turns}
        env.close()


def test_a_reply_without_an_action_is_answered_and_uses_a_turn():
    register()
    row = dataset_rows("TextCraft-v0", "test", limit=1)[0]
    env = skyrl_gym.make("TextCraft-v0", env_config={"max_turns": 2}, extras=row)
    env.init(row["prompt"])
    out = env.step("I am not sure what to do.")
    assert out["metadata"]["valid"] is False and out["metadata"]["action"] == "<invalid format>"
    assert out["observations"][0]["role"] == "user" and not out["done"]
    assert out["reward"] == 0.0 and env.turns == 1
    assert env.step("still nothing")["done"]  # max_turns=2 replies
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("Action: [[ inventory ]]")
