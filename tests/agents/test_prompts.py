"""Prompts: the texts, rendering, reply format round trips, conversations and history windows."""

from __future__ import annotations

import pytest

from agentenvs.agents.prompts import (
    PROMPTS,
    Conversation,
    PastStep,
    UnknownPromptError,
    alfworld,
    default_history,
    env_prompt,
    format_error_feedback,
    format_reply,
    parse_action,
    prompt_messages,
    render_observation,
    sokoban,
    system_prompt,
    webshop,
)

ALL_IDS = ["TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0"]


def test_every_environment_has_a_prompt() -> None:
    assert sorted(PROMPTS) == sorted(ALL_IDS)
    with pytest.raises(UnknownPromptError, match="prompts exist for"):
        system_prompt("Nope-v0")


def test_paper_and_verl_agent_texts() -> None:
    tc = system_prompt("TextCraft-v0")
    assert tc.startswith("You are a Minecraft Assistant. Your goal is to craft items")
    assert "3. BOX FORMAT: wrap your command in [[ ]], e.g., Action: [[ inventory ]]" in tc
    assert tc.endswith("Think: Goal achieved.\nAction: [[ Task Completed! ]]")
    assert (
        "Your response should use exactly this format:\nThought:\nyour thoughts.\n\n"
        "Action:\n[[ your next action ]]" in system_prompt("BabyAI-Text-v0")
    )
    assert system_prompt("ALFWorld-v0").endswith("Your response should contain only the action.")
    # verl-agent's templates are user messages: no system prompt, and kept to the character.
    assert system_prompt("Sokoban-v0") == system_prompt("WebShop-v0") == ""
    assert (
        "observaitons" in sokoban.SOKOBAN_TEMPLATE
        and "e\u2011commerce environment. \n" in webshop.WEBSHOP_TEMPLATE_NO_HIS
    )
    assert default_history("WebShop-v0") == 2 and default_history("Sokoban-v0") == 3
    assert default_history("TextCraft-v0") is None


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_reply_round_trip(env_id: str) -> None:
    for action in (
        "inventory",
        "craft 4 oak planks using 1 oak logs",
        "click[buy now]",
        "go to bed 1",
    ):
        reply = format_reply("Because it helps.", action, env_id)
        parsed = parse_action(env_id, reply)
        assert parsed.action == action, reply
        if env_prompt(env_id).reply_format.value != "plain":
            assert parsed.thought == "Because it helps."


def test_reply_formats() -> None:
    assert format_reply("t", "a") == "Think: t\nAction: [[ a ]]"
    assert format_reply("t", "a", "BabyAI-Text-v0") == "Thought:\nt\n\nAction:\n[[ a ]]"
    assert format_reply("t", "up", "Sokoban-v0") == "<think>t</think>\n<action>up</action>"
    assert format_reply("t", "look", "ALFWorld-v0") == "look"


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_format_error_feedback_names_the_format(env_id: str) -> None:
    text = format_error_feedback(env_id, "no action found")
    assert "no action found" in text
    marker = {"tags": "<action>", "plain": "only the action"}.get(
        env_prompt(env_id).reply_format.value, "[[ ]]"
    )
    assert marker in text


def test_alfworld_first_turn_has_the_fixed_user_message() -> None:
    first = render_observation("ALFWorld-v0", "You are in a room.\nYour task is to: x.", first=True)
    assert first == f"{alfworld.ALFWORLD_USER}\n\nYou are in a room.\nYour task is to: x."
    assert render_observation("ALFWorld-v0", "Nothing happens.") == "Nothing happens."


def test_sokoban_history_lines_are_verl_agents() -> None:
    past = [PastStep("#P#", "up"), PastStep("#_#", "down"), PastStep("#X#", "left")]
    text = render_observation("Sokoban-v0", "#S#", past=past, history=2)
    assert "already taken 3 step(s). Below are the most recent 2 observaitons" in text
    assert (
        "[Observation 2: '#_#', Action 2: 'down']\n[Observation 3: '#X#', Action 3: 'left']" in text
    )
    assert "You are now at step 4 and your current observation is:\n#S#\n" in text
    assert "Observation 1" not in text
    assert render_observation("Sokoban-v0", "#P#") == sokoban.SOKOBAN_TEMPLATE_NO_HIS.format(
        current_observation="#P#"
    )


def test_webshop_page_task_and_actions() -> None:
    obs = "WebShop [SEP] Instruction: [SEP] i want red shoes [SEP] Search"
    info = {"admissible_actions": ["search[<your query>]", "click[search]"]}
    text = render_observation("WebShop-v0", obs, info)
    assert "Your task is to: i want red shoes." in text
    assert "Your current observation is: 'Search'." in text
    assert "[\n'search[<your query>]',\n'click[search]',\n]." in text


def _play_fake(conv: Conversation, turns: list[tuple[str, str | None, str]]) -> list[list[dict]]:
    """Feed (reply, action or None, next observation) turns; return each turn's prompt."""
    prompts = []
    for reply, action, observation in turns:
        prompts.append(conv.prompt())
        conv.add_reply(reply, action)
        if action is None:
            conv.add_format_error(format_error_feedback(conv.env_id, "bad"), {})
        else:
            conv.add_observation(observation, {})
    return prompts


@pytest.mark.parametrize("history", [None, 0, 1, 2])
@pytest.mark.parametrize("env_id", ["TextCraft-v0", "Sokoban-v0", "ALFWorld-v0"])
def test_stored_messages_rebuild_every_prompt(env_id: str, history: int | None) -> None:
    conv = Conversation(env_id, history)
    conv.start("first observation", {})
    turns = [(f"reply {i}", None if i == 2 else f"act {i}", f"obs {i}") for i in range(5)]
    prompts = _play_fake(conv, turns)
    for turn, prompt in enumerate(prompts):
        assert prompt_messages(env_id, conv.messages, turn, history) == prompt
    roles = [m["role"] for m in conv.messages]
    assert roles[-1] == "user" and roles.count("assistant") == 5


def test_chat_window_keeps_system_first_user_and_last_exchanges() -> None:
    conv = Conversation("TextCraft-v0", history=2)
    conv.start("Crafting commands:\ncraft 1 x using 1 y\n\nGoal: craft x.", {})
    _play_fake(conv, [(f"reply {i}", f"get {i} y", f"Got {i} y") for i in range(4)])
    prompt = conv.prompt()
    assert [m["role"] for m in prompt] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert prompt[1]["content"].startswith("Crafting commands:")
    assert [m["content"] for m in prompt[2:]] == ["reply 2", "Got 2 y", "reply 3", "Got 3 y"]
    full = Conversation("TextCraft-v0", history=None)
    full.start("obs", {})
    _play_fake(full, [(f"r{i}", "inventory", f"o{i}") for i in range(3)])
    assert full.prompt() == full.messages


def test_template_format_error_repeats_the_state() -> None:
    conv = Conversation("Sokoban-v0")
    conv.start("#P#", {})
    conv.add_reply("no tags here", None)
    conv.add_format_error(format_error_feedback("Sokoban-v0", "no tags"), {})
    prompt = conv.prompt()
    assert len(prompt) == 1 and prompt[0]["role"] == "user"
    assert prompt[0]["content"].startswith("Invalid response format (no tags)")
    assert "Your current observation is:\n#P#" in prompt[0]["content"]


def test_named_prompts_choose_by_name_and_check_the_environment() -> None:
    from agentenvs.agents.prompts import NAMED_PROMPTS

    assert {p.name for p in PROMPTS.values()} <= set(NAMED_PROMPTS)
    assert env_prompt("ALFWorld-v0", "alfworld-verl-agent").style == "template"
    with pytest.raises(UnknownPromptError, match="is ALFWorld-v0's, not WebShop-v0's"):
        env_prompt("WebShop-v0", "alfworld-verl-agent")
    with pytest.raises(UnknownPromptError, match="named prompts"):
        env_prompt("ALFWorld-v0", "alfworld-gigpo")


def test_alfworld_verl_agent_template_lists_admissible_actions() -> None:
    info = {"admissible_actions": ["go to desk 1", "help", "look"]}
    first = render_observation(
        "ALFWorld-v0",
        "You are in a room.\nYour task is to: put a pen on desk.",
        info,
        prompt="alfworld-verl-agent",
    )
    assert first == alfworld.ALFWORLD_TEMPLATE_NO_HIS.format(
        current_observation="You are in a room.\nYour task is to: put a pen on desk.",
        admissible_actions="'go to desk 1'\n 'look'",
    )
    conv = Conversation("ALFWorld-v0", prompt="alfworld-verl-agent")
    assert conv.history == 2
    conv.start("Room.\nYour task is to: put a pen on desk.", info)
    conv.add_reply("<think>x</think><action>go to desk 1</action>", "go to desk 1")
    conv.add_observation("You arrive at desk 1.", info)
    last = conv.prompt()[-1]["content"]
    assert (
        "Your task is to: put a pen on desk.\nPrior to this step, you have already taken 1" in last
    )
    assert (
        "[Observation 1: 'Room.\nYour task is to: put a pen on desk.', Action 1: 'go to desk 1']"
        in last
    )
    assert len(conv.prompt()) == 1  # one user message a step, no system prompt


def test_alfworld_agentgym_prompt_appends_the_available_actions() -> None:
    info = {"admissible_actions": ["go to desk 1", "look"]}
    text = render_observation(
        "ALFWorld-v0", "On the desk 1, you see a pen 1.", info, prompt="alfworld-agentgym"
    )
    assert text == "On the desk 1, you see a pen 1.\nAVAILABLE ACTIONS: go to desk 1,look"
    first = render_observation("ALFWorld-v0", "Room.", info, first=True, prompt="alfworld-agentgym")
    assert first.startswith(alfworld.ALFWORLD_USER + "\n\nRoom.\nAVAILABLE ACTIONS: ")
    assert render_observation("ALFWorld-v0", "Room.", {}, prompt="alfworld-agentgym") == "Room."
    assert system_prompt("ALFWorld-v0", "alfworld-agentgym") == alfworld.ALFWORLD_SYSTEM
