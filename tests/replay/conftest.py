"""Fixtures of the replay tests: the tiny local model and expert-played teacher trajectories.

Trajectories are built here by stepping the real environment with its scripted expert and writing
:class:`agentenvs.agents.trajectory.Trajectory` records with a simple local message list (system
prompt, observation as the user turn, ``Think: ...\\nAction: [[ ... ]]`` as the assistant turn), so
these tests do not depend on the agents' prompt and rollout modules.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentenvs.agents.trajectory import StepRecord, Trajectory

SYSTEM = "You are an agent in a text environment. Think, then give one action as Action: [[ ... ]]"


def play(
    env_id: str,
    task_id: str,
    *,
    insert: dict[int, str] | None = None,
    final_observation: bool = True,
    sample_index: int = 0,
) -> Trajectory:
    """One expert episode as a Trajectory; ``insert[i]`` is played instead of the expert at turn
    ``i``. Without ``final_observation`` the message list ends at the last assistant turn."""
    from agentenvs import make
    from agentenvs.expert import make_expert

    env = make(env_id)
    expert = make_expert(env_id)
    expert.reset()
    observation, _ = env.reset(options={"task_id": task_id})
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": observation}]
    steps: list[StepRecord] = []
    total = 0.0
    while not env.done:
        turn = len(steps)
        if insert and turn in insert:
            action, thought = insert[turn], "Let me look at the state first."
        else:
            decision = expert.act(env)
            action, thought = decision.action, decision.thought
        anchor = env.observation
        observation, reward, _, _, info = env.step(action)
        total += reward
        messages.append(
            {"role": "assistant", "content": f"Think: {thought}\nAction: [[ {action} ]]"}
        )
        messages.append({"role": "user", "content": observation})
        steps.append(
            StepRecord(anchor, action, observation, reward, info["valid"], dict(info["fields"]))
        )
    if not final_observation:
        messages.pop()
    return Trajectory(
        env_id=env_id,
        task_id=task_id,
        family=env.family(task_id),
        group_id=f"{env_id}:{task_id}",
        sample_index=sample_index,
        agent="expert",
        messages=messages,
        steps=steps,
        total_reward=total,
        won=env.won,
        turns=env.turn,
        terminated=env.done and env.won,
        truncated=env.done and not env.won,
    )


def unparsed_turn(traj: Trajectory, turn: int, feedback: str = "Invalid format.") -> Trajectory:
    """A copy of ``traj`` with an unparsed reply inserted before assistant turn ``turn``."""
    messages = [dict(m) for m in traj.messages]
    at = [i for i, m in enumerate(messages) if m["role"] == "assistant"][turn]
    anchor = traj.steps[turn].anchor
    messages[at:at] = [
        {"role": "assistant", "content": "I will just think aloud without an action."},
        {"role": "user", "content": feedback},
    ]
    steps = list(traj.steps)
    steps.insert(turn, StepRecord(anchor, None, feedback, 0.0, False, {}))
    return Trajectory(**{**traj.__dict__, "messages": messages, "steps": steps})


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from agentenvs.agents.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir: str):
    """(model, tokenizer) of the tiny model, loaded once."""
    from agentenvs.replay.scoring import load_model

    return load_model(tiny_model_dir)


@pytest.fixture(scope="session")
def scorer(tiny_lm):
    from agentenvs.replay.scoring import TokenScorer

    model, tokenizer = tiny_lm
    return TokenScorer(model, pad_token_id=tokenizer.pad_token_id, batch_tokens=4096)


@pytest.fixture(scope="session")
def expert_trajectory() -> Callable[..., Trajectory]:
    return play


@pytest.fixture(scope="session")
def with_unparsed_turn() -> Callable[..., Trajectory]:
    return unparsed_turn
