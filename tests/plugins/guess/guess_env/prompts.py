"""The prompt (its reply format is the parser of replies) and one benchmark protocol."""

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt
from agentenvs.agents.protocols import EnvProtocol, Protocol, Sampling

SYSTEM = (
    "You play guess-the-number. Reply with 'Think: <reason>' on one line, then "
    "'Action: [[ guess N ]]'."
)
INVALID = "Please reply with Think: ... then Action: [[ guess N ]]."

PROMPTS = (
    EnvPrompt(
        "Guess-v0",
        SYSTEM,
        "chat",
        ReplyFormat.THINK_BRACKETS,
        "guess 5",
        name="guess-default",
    ),
)

PROTOCOLS = (
    Protocol(
        "guess-basic",
        "Guess-the-number's own setup",
        {
            "Guess-v0": EnvProtocol(
                "Guess-v0",
                env_kwargs={},
                prompt="guess-default",
                admissible="none",
                parser="think_brackets",
                unparseable="feedback",
                invalid_feedback=INVALID,
                max_turns={"eval": 8, "train": 8},
                history=None,
                sampling={"eval": Sampling(1.0, 1.0, 64), "train": Sampling(1.0, 1.0, 64)},
            )
        },
    ),
)
