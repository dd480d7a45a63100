"""The action parser: brackets (nested, several, none), Action: lines, tags, plain replies."""

from __future__ import annotations

import pytest

from agentenvs.agents.parsing import ParseResult, ReplyFormat, find_bracket_actions, parse_reply

TB = ReplyFormat.THINK_BRACKETS


@pytest.mark.parametrize(
    ("text", "action", "method"),
    [
        ("Think: need logs.\nAction: [[ get 1 oak logs ]]", "get 1 oak logs", "brackets"),
        ("Action: [[ click[buy now] ]]", "click[buy now]", "brackets"),
        ("Action: [[search[red shoes]]]", "search[red shoes]", "brackets"),
        ("Action: [[ click[[b] x] ]]", "click[[b] x]", "brackets"),
        ("first [[ inventory ]] then [[ get 2 stick ]]", "get 2 stick", "brackets"),
        ("Action: [[   get   3  oak   logs ]]", "get 3 oak logs", "brackets"),
        (
            "Think: ok\nAction: craft 4 oak planks using 1 oak logs",
            "craft 4 oak planks using 1 oak logs",
            "action_line",
        ),
        ("Think: ok\n**Action:** `inventory`", "inventory", "action_line"),
        ("Thought:\nturn.\n\nAction:\nturn left", "turn left", "action_line"),
        ("Action: [inventory]", "inventory", "action_line"),
        ("action: get 1 stick\nAction: get 2 stick", "get 2 stick", "action_line"),
        ("<think>draft [[ get 9 dirt ]]</think>\nAction: [[ inventory ]]", "inventory", "brackets"),
    ],
)
def test_bracket_format(text: str, action: str, method: str) -> None:
    result = parse_reply(text, TB)
    assert result == ParseResult(action, result.thought, method, None)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        ("I will get some logs now.", "no action wrapped in [[ ]]"),
        ("Action: [[ ]]", "the action is empty"),
        ("Action: [[ get 1 oak logs", "unclosed [["),
        ("Think: hmm\nAction:", "no action wrapped in [[ ]]"),
    ],
)
def test_bracket_format_failures(text: str, error: str) -> None:
    result = parse_reply(text, TB)
    assert result.action is None and not result.ok
    assert error in (result.error or "")


def test_thoughts() -> None:
    assert (
        parse_reply("Think: I need planks.\nAction: [[ inventory ]]", TB).thought
        == "I need planks."
    )
    babyai = parse_reply(
        "Thought:\nThe ball is ahead.\n\nAction:\n[[ move forward ]]", ReplyFormat.THOUGHT_BRACKETS
    )
    assert (babyai.action, babyai.thought) == ("move forward", "The ball is ahead.")


def test_tag_format() -> None:
    ok = parse_reply("<think>box below</think>\n<action>down</action>", ReplyFormat.TAGS)
    assert (ok.action, ok.thought, ok.method) == ("down", "box below", "tag")
    several = parse_reply("<action>up</action> no wait <action> left </action>", ReplyFormat.TAGS)
    assert several.action == "left"
    assert parse_reply("<think>x</think>\nAction: right", ReplyFormat.TAGS).action == "right"
    missing = parse_reply("<think>I go up</think> up", ReplyFormat.TAGS)
    assert missing.action is None and "<action>" in missing.error
    assert parse_reply("<action></action>", ReplyFormat.TAGS).error == "the action is empty"


def test_plain_format() -> None:
    assert parse_reply("go to bed 1", ReplyFormat.PLAIN).action == "go to bed 1"
    assert parse_reply("  take pillow 2 from bed 1 \n", ReplyFormat.PLAIN).method == "plain"
    assert parse_reply("I think\nAction: [[ look ]]", ReplyFormat.PLAIN).action == "look"
    several = parse_reply("go to bed 1\ngo to desk 1", ReplyFormat.PLAIN)
    assert several.action is None and "several lines" in several.error


def test_find_bracket_actions_in_order() -> None:
    assert find_bracket_actions("[[a]] x [[ b[c] ]] [[ unclosed") == ["a", "b[c]"]
    assert find_bracket_actions("[x] [[]] ]]") == [""]


def test_overlong_action_is_an_error() -> None:
    result = parse_reply("Action: [[ " + "a" * 2000 + " ]]", TB)
    assert result.action is None and "longer than" in result.error
