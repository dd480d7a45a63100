"""Extract the action from a model's reply, per reply format, and say why when it cannot.

Every environment's prompt asks for one reply format (:class:`ReplyFormat`):

* ``THINK_BRACKETS`` (TextCraft, the paper's): ``Think: ...`` then ``Action: [[ ... ]]``;
* ``THOUGHT_BRACKETS`` (BabyAI, the paper's): ``Thought:\\n...\\n\\nAction:\\n[[ ... ]]``;
* ``PLAIN`` (ALFWorld, the paper's "Your response should contain only the action."): the action;
* ``TAGS`` (WebShop and Sokoban, verl-agent's): ``<think>...</think>`` then
  ``<action>...</action>``.

The parser tries, in order, the format's own marker and then the fallbacks:

1. brackets: the **last** top-level ``[[ ... ]]`` (nested single brackets such as
   ``[[ click[buy now] ]]`` stay inside the action); for ``TAGS`` the last ``<action>...</action>``;
2. the last line starting with ``Action:`` (its text, or the next non-empty line when the label
   stands alone), with one layer of quotes, backticks or brackets stripped;
3. for ``PLAIN`` only: a reply that is a single non-empty line is the action itself.

Nothing found, or an empty action, is a :class:`ParseResult` with ``action`` None and an
``error`` that says what was missing; the rollout turns it into format-error feedback without
stepping the environment.

The benchmark protocols (:mod:`agentenvs.agents.protocols`) name their parser in :data:`PARSERS`:
the reply-format parsers above (``agentgym-babyai`` lower-cases the action as Prefix-GRPO's BabyAI
interaction does), Prefix-GRPO's ALFWorld ``extract_action`` (:func:`parse_agentgym_alfworld`), and
verl-agent's projections (:func:`project_verl_agent`). A projection never returns ``action`` None: a
reply that breaks the format still becomes an action that is stepped (the reply's last 30 / 20
characters for ALFWorld / WebShop, ``still`` for Sokoban), with ``error`` saying why it is invalid,
so the step is recorded ``valid = False`` and the trainer's invalid-action penalty applies
(verl-agent's ``is_action_valid``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from agentenvs.suggestions import did_you_mean

__all__ = [
    "MAX_ACTION_CHARS",
    "PARSERS",
    "ParseResult",
    "ReplyFormat",
    "UnknownParserError",
    "find_bracket_actions",
    "get_parser",
    "parse_agentgym_alfworld",
    "parse_reply",
    "project_verl_agent",
]

MAX_ACTION_CHARS = 1000

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_ACTION_LINE = re.compile(r"^\s*\**\s*action\s*\**\s*:\s*\**(.*)$", re.IGNORECASE)
_THINK_LINE = re.compile(r"^\s*(?:think|thought)\s*:\s*(.*)$", re.IGNORECASE | re.DOTALL)


class ReplyFormat(str, enum.Enum):
    """How a reply carries its thought and action (see the module docstring)."""

    THINK_BRACKETS = "think_brackets"
    THOUGHT_BRACKETS = "thought_brackets"
    PLAIN = "plain"
    TAGS = "tags"


@dataclass(frozen=True)
class ParseResult:
    """What :func:`parse_reply` found.

    ``action`` is the clean action string for ``env.step`` (None when none was found);
    ``thought`` the reasoning text where the format has one; ``method`` which rule matched
    (``brackets``, ``tag``, ``action_line``, ``plain``, ``projection`` or ``none``); ``error``
    why parsing failed (None on success). A projection (``method == "projection"``) may carry
    both an action and an error: the action is stepped and the step counts as invalid.
    """

    action: str | None
    thought: str | None = None
    method: str = "none"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.action is not None


def find_bracket_actions(text: str) -> list[str]:
    """Every top-level ``[[ ... ]]`` span's content, stripped, in order of appearance.

    Single brackets nest inside (``[[ search[red shoes] ]]`` gives ``search[red shoes]``); an
    unclosed ``[[`` is ignored.
    """
    found: list[str] = []
    i, n = 0, len(text)
    while i < n - 1:
        if text.startswith("[[", i):
            end = _matching_close(text, i)
            if end is not None:
                found.append(text[i + 2 : end - 2].strip())
                i = end
                continue
        i += 1
    return found


def _matching_close(text: str, start: int) -> int | None:
    """The index just past the ``]]`` that closes the ``[[`` at ``start`` (None if unclosed)."""
    depth = 0
    for j in range(start, len(text)):
        ch = text[j]
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return j + 1 if text[j - 1] == "]" and j - 1 > start + 1 else None
            if depth < 0:
                return None
    return None


def parse_reply(
    text: str, reply_format: ReplyFormat | str = ReplyFormat.THINK_BRACKETS
) -> ParseResult:
    """The action (and thought) of a reply in ``reply_format``; see the module docstring."""
    reply_format = ReplyFormat(reply_format)
    if not isinstance(text, str) or not text.strip():
        return ParseResult(None, error="the reply is empty")
    thought = _thought(text, reply_format)
    if reply_format is ReplyFormat.TAGS:
        tags = _ACTION_TAG.findall(text)
        if tags:
            return _result(tags[-1], thought, "tag")
    else:
        brackets = find_bracket_actions(_strip_think_blocks(text))
        if brackets:
            return _result(brackets[-1], thought, "brackets")
    line = _action_line(text)
    if line is not None:
        if line.startswith("[[") and not line.endswith("]]"):
            return ParseResult(
                None, thought, "action_line", error="an unclosed [[ (was the reply cut off?)"
            )
        return _result(line, thought, "action_line")
    if reply_format is ReplyFormat.PLAIN:
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if len(lines) == 1:
            return _result(lines[0], None, "plain")
        return ParseResult(None, error="the reply has several lines and no [[ ]] or 'Action:' line")
    return ParseResult(None, thought, error=_missing(reply_format))


def _result(raw: str, thought: str | None, method: str) -> ParseResult:
    action = _unwrap(" ".join(raw.split()))
    if not action:
        return ParseResult(None, thought, method, error="the action is empty")
    if len(action) > MAX_ACTION_CHARS:
        return ParseResult(
            None, thought, method, error=f"the action is longer than {MAX_ACTION_CHARS} characters"
        )
    return ParseResult(action, thought, method)


def _missing(reply_format: ReplyFormat) -> str:
    if reply_format is ReplyFormat.TAGS:
        return "no <action> </action> tags and no 'Action:' line"
    return "no action wrapped in [[ ]] and no 'Action:' line"


def _strip_think_blocks(text: str) -> str:
    """Drop ``<think>...</think>`` reasoning (Qwen3-style) so its drafts are not taken."""
    stripped = _THINK_BLOCK.sub(" ", text)
    return stripped if stripped.strip() else text


def _action_line(text: str) -> str | None:
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        m = _ACTION_LINE.match(lines[index])
        if not m:
            continue
        rest = m.group(1).strip().strip("*").strip()
        if rest:
            return rest
        following = [ln.strip() for ln in lines[index + 1 :] if ln.strip()]
        if following:
            return following[0]
    return None


def _unwrap(action: str) -> str:
    """Strip one layer of quotes / backticks / brackets and a trailing period."""
    action = action.strip()
    for left, right in (("[[", "]]"), ("`", "`"), ('"', '"'), ("'", "'"), ("<", ">")):
        if (
            len(action) >= len(left) + len(right)
            and action.startswith(left)
            and action.endswith(right)
        ):
            action = action[len(left) : len(action) - len(right)].strip()
            break
    if action.startswith("[") and action.endswith("]") and action.count("[") == 1:
        action = action[1:-1].strip()
    return action


def _thought(text: str, reply_format: ReplyFormat) -> str | None:
    if reply_format is ReplyFormat.TAGS:
        m = _THINK_BLOCK.search(text)
        return m.group(1).strip() if m else None
    if reply_format is ReplyFormat.PLAIN:
        return None
    head = re.split(
        r"^\s*\**\s*action\s*\**\s*:", text, maxsplit=1, flags=re.IGNORECASE | re.MULTILINE
    )[0]
    m = _THINK_LINE.match(head.strip())
    return m.group(1).strip() if m else None


# --------------------------------------------------------------------------------------------
# The benchmark protocols' parsers

_CJK = re.compile(r"[\u4e00-\u9fff]")
_BRACKETS_FIRST = re.compile(r"\[\[([^\]]+)\]\]")
_ACTION_ANYWHERE = re.compile(r"Action:\s*(.+)", re.IGNORECASE)
# verl-agent's projection keeps this many trailing characters of a reply without <action> tags.
_VERL_AGENT_TAIL = {"alfworld": 30, "webshop": 20}
SOKOBAN_ACTIONS = ("up", "down", "left", "right", "still")  # verl-agent's order, "still" = 0


class UnknownParserError(KeyError):
    """A parser name that :data:`PARSERS` lacks; the message lists the valid ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def _strip_brackets(action: str) -> str:
    return re.sub(r"\s*\]\]$", "", re.sub(r"^\[\[\s*", "", action.strip()))


def parse_agentgym_alfworld(text: str) -> ParseResult:
    """Prefix-GRPO's ALFWorld ``extract_action``: ``<think>`` blocks dropped, then the first
    non-empty ``[[ ... ]]``, else the first ``Action: ...``, else the last non-empty line under
    100 characters; the action lower-cased."""
    if not isinstance(text, str) or not text.strip():
        return ParseResult(None, error="the reply is empty")
    body = re.sub(r"<think>.*?</think>", "", text.strip(), flags=re.DOTALL)
    for match in _BRACKETS_FIRST.findall(body):
        if match.strip():
            return _result(match.strip().lower(), None, "brackets")
    found = _ACTION_ANYWHERE.search(body)
    if found:
        action = _strip_brackets(found.group(1)).lower()
        if action:
            return _result(action, None, "action_line")
        return ParseResult(None, method="action_line", error="the action is empty")
    for line in reversed(body.strip().split("\n")):
        line = line.strip()
        if line and len(line) < 100:
            action = _strip_brackets(line).lower()
            if action:
                return _result(action, None, "plain")
    return ParseResult(None, error="no [[ ]], no 'Action:' and no line under 100 characters")


def project_verl_agent(text: str, env: str) -> ParseResult:
    """verl-agent's ``{alfworld,webshop,sokoban}_projection`` of one reply (``env`` one of
    those three names).

    The action is the text between the first ``<action>`` and the first ``</action>`` of the
    lower-cased reply (Sokoban: the first of up/down/left/right/still it contains, else
    ``still``). Without both tags the action is the reply's last 30 (ALFWorld) / 20 (WebShop)
    lower-cased characters, or ``still`` (Sokoban). The reply is invalid (``error`` set) without
    both tags, without both ``<think>`` and ``</think>``, or (ALFWorld, WebShop) when it holds
    CJK characters; the action is stepped all the same.
    """
    if env not in ("alfworld", "webshop", "sokoban"):
        raise ValueError(f"verl-agent projects alfworld, webshop or sokoban replies, not {env!r}")
    text = text if isinstance(text, str) else ""
    lower = text.lower()
    start, end = lower.find("<action>"), lower.find("</action>")
    think = _THINK_BLOCK.search(text)
    thought = think.group(1).strip() if think else None
    if start == -1 or end == -1:
        action = "still" if env == "sokoban" else lower[-_VERL_AGENT_TAIL[env] :]
        return ParseResult(action, thought, "projection", "no <action> </action> tags")
    extracted = lower[start + len("<action>") : end].strip()
    error = None
    if env == "sokoban":
        action = next((a for a in SOKOBAN_ACTIONS if a in extracted), None)
        if action is None:
            action, error = "still", "no up/down/left/right/still in <action> </action>"
    else:
        action = extracted
    if error is None and (text.find("<think>") == -1 or text.find("</think>") == -1):
        error = "no <think> </think> tags"
    if error is None and env != "sokoban" and _CJK.search(text):
        error = "the reply holds CJK characters"
    return ParseResult(action, thought, "projection", error)


def _lowercased(result: ParseResult) -> ParseResult:
    return replace(result, action=result.action.lower()) if result.action else result


PARSERS: dict[str, Callable[[str], ParseResult]] = {
    "think_brackets": lambda text: parse_reply(text, ReplyFormat.THINK_BRACKETS),
    "thought_brackets": lambda text: parse_reply(text, ReplyFormat.THOUGHT_BRACKETS),
    "plain": lambda text: parse_reply(text, ReplyFormat.PLAIN),
    "tags": lambda text: parse_reply(text, ReplyFormat.TAGS),
    "agentgym-babyai": lambda text: _lowercased(parse_reply(text, ReplyFormat.THOUGHT_BRACKETS)),
    "agentgym-alfworld": parse_agentgym_alfworld,
    "verl-agent-alfworld": lambda text: project_verl_agent(text, "alfworld"),
    "verl-agent-webshop": lambda text: project_verl_agent(text, "webshop"),
    "verl-agent-sokoban": lambda text: project_verl_agent(text, "sokoban"),
}
"""Parser name -> ``text -> ParseResult`` (see the module docstring)."""


def get_parser(name: str) -> Callable[[str], ParseResult]:
    """The parser called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return PARSERS[name]
    except KeyError:
        hint = did_you_mean(name, PARSERS)
        raise UnknownParserError(
            f"unknown parser {name!r}; choose from {sorted(PARSERS)}.{hint}"
        ) from None
