"""What the MCP tools tell a model about each environment: the action forms of
``agentenvs.serve.mcp_describe.BRIEFS`` match every action the expert takes on test tasks (so a
model that follows the description speaks the environment's language), and each tool's schema
carries the environment's splits, task id forms and action length limit."""

from __future__ import annotations

import pytest

from agentenvs import env_class
from agentenvs.serve.mcp_describe import (
    BRIEFS,
    action_pattern,
    lists_admissible,
    server_instructions,
    tool_specs,
)

from .test_mcp import ENVS, played_in_process

EPISODES = 3


@pytest.mark.parametrize("env_id", ENVS)
def test_every_expert_action_has_a_described_form(env_id: str) -> None:
    patterns = [action_pattern(form) for form in BRIEFS[env_id].actions]
    for task_id in env_class(env_id)().task_ids("test")[:EPISODES]:
        _, steps = played_in_process(env_id, task_id)
        for action, _ in steps:
            assert any(p.match(action) for p in patterns), (env_id, action)


def test_action_patterns() -> None:
    craft = action_pattern("craft <count> <item> using <count> <item>, ...")
    assert craft.match("craft 1 stick using 2 bamboo")
    assert craft.match("craft 6 powered rail using 1 redstone, 1 stick, 6 gold ingot")
    assert not craft.match("get 1 stick")
    put = action_pattern("put <object> in/on <receptacle>")
    assert put.match("put mug 1 in/on coffeemachine 1") and put.match("put mug 1 on table 1")
    assert action_pattern("search[<query>]").match("search[red shoes]")
    assert not action_pattern("up").match("upp")


@pytest.mark.parametrize("env_id", ENVS)
def test_schemas_and_descriptions_name_the_environment(env_id: str) -> None:
    env = env_class(env_id)()
    counts = {s: len(env.task_ids(s)) for s in env.splits}
    specs = {t.name: t for t in tool_specs(env, counts)}
    reset, step = specs["reset"], specs["step"]
    assert reset.input_schema["properties"]["split"]["enum"] == list(env.splits)
    for form in env.task_id_forms:
        assert form in reset.description
    assert step.input_schema["properties"]["action"]["maxLength"] == env.max_action_length
    for form in BRIEFS[env_id].actions:
        assert form in step.description
    assert ("lists the actions valid now" in step.description) == lists_admissible(env)
    text = server_instructions(env, counts)
    assert env_id in text and str(env.max_turns) in text
    assert all(f"{s} ({n} tasks)" in text for s, n in counts.items())
