"""Benchmark protocols: the data, the docs table, and that each prompt agrees with its engine.

The agreement tests play the expert through :func:`agentenvs.agents.rollout.run_rollouts` under each
protocol: the expert's thought and action are rewritten in the protocol's reply format
(:func:`agentenvs.agents.prompts.format_reply` with the protocol's prompt), parsed by the protocol's
parser and stepped in the environment made with the protocol's keywords; every step must be valid
and every episode won. Where a prompt teaches action forms (the paper's ALFWorld verbs), the test
also checks that the played actions use them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentenvs.agents.parsing import (
    PARSERS,
    get_parser,
    parse_agentgym_alfworld,
    project_verl_agent,
)
from agentenvs.agents.policy import Completion, Policy
from agentenvs.agents.prompts import NAMED_PROMPTS, env_prompt
from agentenvs.agents.protocol_docs import protocols_markdown
from agentenvs.agents.protocols import (
    DEFAULT_PROTOCOLS,
    PROTOCOLS,
    UnknownProtocolError,
    default_protocol,
    env_protocol,
    get_protocol,
)
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

ROOT = Path(__file__).resolve().parents[2]
SETUPS = [(p, env) for p, protocol in PROTOCOLS.items() for env in protocol.envs]
# A handful of games per task family where the paper's verbs show (engine step ~65 ms).
ALFWORLD_GAMES = ["agentgym/2424", "agentgym/2427", "agentgym/2421", "agentgym/2422"]


def test_every_setup_names_real_prompts_parsers_and_sources() -> None:
    for name, env_id in SETUPS:
        setup = env_protocol(name, env_id)
        assert NAMED_PROMPTS[setup.prompt].env_id == env_id
        assert setup.parser in PARSERS
        for key in ("prompt", "admissible", "parser", "unparseable", "history", "invalid_penalty"):
            assert setup.sources.get(key), f"{name}/{env_id}: no source for {key}"
        for key in ("max_turns", "sampling"):
            for mode in ("eval", "train"):
                assert setup.sources.get(f"{key}.{mode}"), f"{name}/{env_id}: {key}.{mode}"
        settings = setup.settings("eval")
        assert settings["max_turns"] == setup.turns("eval") and "temperature" in settings
    assert {default_protocol(env) for env in DEFAULT_PROTOCOLS} == set(PROTOCOLS)
    for env_id, name in DEFAULT_PROTOCOLS.items():
        assert env_id in get_protocol(name).envs


def test_unknown_protocols_list_the_valid_ones() -> None:
    with pytest.raises(UnknownProtocolError, match=r"choose from \['prefix-grpo', 'ptgpo'\]"):
        get_protocol("verl")
    with pytest.raises(UnknownProtocolError, match="Did you mean 'ptgpo'"):
        get_protocol("ptgp")
    with pytest.raises(UnknownProtocolError, match=r"no setup for TextCraft-v0.*\['prefix-grpo'\]"):
        env_protocol("ptgpo", "TextCraft-v0")
    with pytest.raises(UnknownProtocolError, match="Did you mean"):
        RolloutConfig(protocol="prefix_grpo")
    with pytest.raises(KeyError, match="unknown parser"):
        get_parser("tag")


def test_docs_table_is_the_protocols_data() -> None:
    docs = (ROOT / "docs" / "protocols.md").read_text()
    assert protocols_markdown() in docs, "regenerate docs/protocols.md's table"


def test_verl_agent_projection() -> None:
    ok = project_verl_agent("<think>go</think><action>Go To Desk 1</action>", "alfworld")
    assert (ok.action, ok.error, ok.thought) == ("go to desk 1", None, "go")
    no_tags = project_verl_agent("I think I should go to the desk number one now", "alfworld")
    assert no_tags.action == "i should go to the desk number one now"[-30:] and no_tags.error
    assert (
        project_verl_agent("click the buy now button please!!", "webshop").action
        == ("click the buy now button please!!"[-20:])
    )
    no_think = project_verl_agent("<action>search[shoes]</action>", "webshop")
    assert no_think.action == "search[shoes]" and "think" in no_think.error
    cjk = project_verl_agent("<think>好</think><action>look</action>", "alfworld")
    assert cjk.action == "look" and "CJK" in cjk.error
    assert project_verl_agent("<think>x</think><action>push left</action>", "sokoban").action == (
        "left"
    )
    for text in ("up please", "<think>x</think><action>jump</action>"):
        still = project_verl_agent(text, "sokoban")
        assert still.action == "still" and still.error


def test_agentgym_alfworld_parser() -> None:
    assert parse_agentgym_alfworld("Thought: x\nAction: [[ Go to Desk 1 ]]").action == (
        "go to desk 1"
    )
    assert parse_agentgym_alfworld("[[ open drawer 1 ]] then [[ look ]]").action == "open drawer 1"
    assert parse_agentgym_alfworld("I look around.\nlook").action == "look"
    assert parse_agentgym_alfworld("  ").action is None


def _expert_run(env_id: str, protocol: str, tasks: list[str], mode: str = "eval"):
    from agentenvs.agents.registry import make_policy

    setup = env_protocol(protocol, env_id)
    config = RolloutConfig(protocol=protocol, max_turns=setup.turns(mode))
    return setup, run_rollouts(make_policy("expert"), env_id, plan_episodes(tasks, 1), config)


def _check_won(trajs, protocol: str) -> None:
    for traj in trajs:
        assert traj.error is None, traj.error
        assert traj.won, f"{traj.task_id} lost under {protocol}: {traj.actions[-5:]}"
        assert all(s.valid for s in traj.steps), [s.observation for s in traj.steps if not s.valid]
        assert (
            traj.protocol == protocol
            and traj.metadata["prompt"] == env_protocol(protocol, traj.env_id).prompt
        )


_NON_ALFWORLD = [s for s in SETUPS if s[1] != "ALFWorld-v0"]


@pytest.mark.parametrize(
    ("protocol", "env_id"), _NON_ALFWORLD, ids=[f"{p}:{e}" for p, e in _NON_ALFWORLD]
)
def test_prompt_and_engine_agree(protocol: str, env_id: str) -> None:
    """The expert's actions, written in the protocol's reply format and parsed by its parser,
    are accepted by the engine made with the protocol's keywords, and win."""
    from agentenvs.registration import make

    env = make(env_id)
    tasks = env.task_ids("test")[:3]
    env.close()
    setup, trajs = _expert_run(env_id, protocol, tasks)
    _check_won(trajs, protocol)
    for key, value in setup.env_kwargs.items():
        if trajs[0].variant and key in trajs[0].variant:
            assert trajs[0].variant[key] == value
    if env_id == "TextCraft-v0":  # the prompt's third command
        env = make(env_id)
        env.reset(options={"task_id": tasks[0]})
        assert env.step(get_parser(setup.parser)("Think: x\nAction: [[ inventory ]]").action)[4][
            "valid"
        ]


@pytest.mark.parametrize("protocol", ["prefix-grpo", "ptgpo"])
def test_alfworld_prompt_and_engine_agree(protocol: str) -> None:
    """ALFWorld in both game versions: the paper's verbs (``put X in/on Y``) on AgentGym's
    games under prefix-grpo, alfworld 0.4's admissible list under ptgpo; every action the
    expert plays is one the prompt lists."""
    setup, trajs = _expert_run("ALFWorld-v0", protocol, ALFWORLD_GAMES)
    _check_won(trajs, protocol)
    expected = setup.env_kwargs["game_version"]
    assert all(t.variant["game_version"] == expected for t in trajs)
    users = [m["content"] for t in trajs for m in t.messages if m["role"] == "user"]
    actions = [a for t in trajs for a in t.actions]
    if protocol == "prefix-grpo":
        taught = env_prompt("ALFWorld-v0", setup.prompt).system
        assert "put [object] in/on [location]" in taught
        puts = [a for a in actions if a.startswith(("put ", "move "))]
        # alfworld 0.3.3's command is literally "put {o} in/on {r}", the paper's form
        assert puts and all(re.fullmatch(r"put \S+ \d+ in/on \S+ \d+", a) for a in puts), puts
        assert all("AVAILABLE ACTIONS: " in u for u in users)
        # every verb the paper's prompt teaches is one of the engine's commands, except toggle,
        # which alfworld 0.3.3's grammar lacks too (the lamp is "use"): the original's mismatch
        listed = {a for u in users for a in u.rpartition("AVAILABLE ACTIONS: ")[2].split(",")}
        for verb in ("go to", "take", "put", "open", "examine", "inventory", "heat", "clean"):
            assert any(a.startswith(verb) for a in listed), verb
        assert "toggle [object]" in taught and not any(a.startswith("toggle") for a in listed)
    else:
        assert any(a.startswith("move ") for a in actions)
        assert all("Your admissible actions of the current situation are" in u for u in users)
    for traj in trajs:  # each played action was in the list shown right before it
        shown = [m["content"] for m in traj.messages if m["role"] == "user"]
        for prompt, action in zip(shown, traj.actions, strict=False):
            assert action in prompt, (action, prompt[-300:])


class _ScriptedReplies(Policy):
    """A language-model stand-in that answers every prompt with the next fixed text (a test
    policy for the reply-handling path, not a model)."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__("scripted-replies")
        self.replies = replies
        self.calls = 0

    def generate(self, prompts, sampling, keys=None):
        out = []
        for _ in prompts:
            out.append(Completion(text=self.replies[min(self.calls, len(self.replies) - 1)]))
        self.calls += 1
        return out


def test_ptgpo_projects_invalid_replies_and_steps_them() -> None:
    """verl-agent's handling: a reply without tags is stepped as Sokoban's action 0 (``still``),
    recorded invalid with the raw reply kept (``info["format_error"]``: what the trainer's
    invalid-action penalty reads), and costs a turn."""
    policy = _ScriptedReplies(["I would like to go up", "<think>x</think><action>up</action>"])
    config = RolloutConfig(protocol="ptgpo", max_turns=2)
    (traj,) = run_rollouts(policy, "Sokoban-v0", plan_episodes(["seed/0"], 1), config)
    first, second = traj.steps
    assert (first.action, first.valid, first.completion) == ("still", False, policy.replies[0])
    assert first.info["format_error"] and first.reward == pytest.approx(-0.1)
    assert "format_error" not in second.info and second.action == "up"
    assert traj.turns == 2 and traj.truncated
    assert "Action 1: 'still'" in traj.messages[2]["content"]  # the projected action in history


def test_prefix_grpo_answers_unparseable_replies_without_stepping() -> None:
    from agentenvs.agents.prompts import textcraft as T

    policy = _ScriptedReplies(["I am not sure what to do.\nMaybe look around?"])
    config = RolloutConfig(protocol="prefix-grpo", max_turns=2)
    (traj,) = run_rollouts(policy, "TextCraft-v0", plan_episodes(["agentgym/0"], 1), config)
    assert [s.action for s in traj.steps] == [None, None]
    assert traj.steps[0].observation == T.TEXTCRAFT_INVALID_ACTION
    assert traj.messages[3]["content"] == T.TEXTCRAFT_INVALID_ACTION and traj.truncated


def test_cuts_of_agentgym_alfworld_replay_on_agentgym_games() -> None:
    """A prefix-grpo ALFWorld teacher trajectory (``put X in/on Y``) records its environment
    keywords, so replay validation plays AgentGym's games too and every cut validates."""
    from agentenvs.replay.query import build_query
    from agentenvs.replay.validate import ValidationStatus, validate_queries

    _, (traj,) = _expert_run("ALFWorld-v0", "prefix-grpo", ["agentgym/2424"])
    assert traj.metadata["env_kwargs"] == {"game_version": "agentgym"}
    queries = [build_query(traj, 0, turn, "fixed-ratio") for turn in (1, 4, traj.turns - 2)]
    assert all(q.env_kwargs == {"game_version": "agentgym"} for q in queries)
    statuses = [r.status for _, r in validate_queries(queries)]
    assert statuses == [ValidationStatus.VALIDATED] * 3
