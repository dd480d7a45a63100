"""Benchmark protocols as data: each paper's evaluation and training setup, per environment.

A number is comparable with a published one only when the whole setup matches: the environment
variant, the prompt, how a reply is parsed and what happens when it cannot be, the turn limits,
the history window and the sampling. A :class:`Protocol` holds one paper's setup for each
environment it reports on (:class:`EnvProtocol`); every setting cites where it was read
(:attr:`EnvProtocol.sources`, rendered as the table of ``docs/protocols.md`` by
:func:`protocols_markdown`).

* ``prefix-grpo``: Prefix-GRPO's setup, AgentGym's environments as HappynessI/Prefix_GRPO runs
  them (TextCraft, BabyAI, ALFWorld with ``game_version="agentgym"``): the paper's prompts
  (§7.4), an unparseable reply answered with the interaction's "Please provide a valid action"
  text without stepping the environment (the reply still uses a turn), every turn kept.
* ``ptgpo``: verl-agent's setup, which GiGPO and PTGPO use (ALFWorld on alfworld 0.4, WebShop,
  Sokoban): verl-agent's one-message templates (ALFWorld's and WebShop's list the admissible
  actions), every reply projected to an action that is stepped (a reply that breaks the
  ``<think>``/``<action>`` format is stepped all the same, counted invalid and penalised by the
  trainer's invalid-action coefficient), the last 2 steps as history.

Each environment's default protocol is the paper that reports on it (:data:`DEFAULT_PROTOCOLS`).
``agentenvs eval ENV --protocol NAME`` and ``agentenvs train rl --protocol NAME`` apply one;
explicit flags (``--temperature``, ``rollout.max_turns=...``) override a setting and are recorded
as overrides. An unknown protocol, or one that has no setup for an environment, is an error
listing the valid choices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentenvs.agents.prompts.alfworld import ALFWORLD_INVALID_ACTION
from agentenvs.agents.prompts.babyai import BABYAI_INVALID_ACTION
from agentenvs.agents.prompts.textcraft import TEXTCRAFT_INVALID_ACTION
from agentenvs.suggestions import did_you_mean

__all__ = [
    "DEFAULT_PROTOCOLS",
    "PROTOCOLS",
    "PROTOCOL_SCHEMA_VERSION",
    "EnvProtocol",
    "Protocol",
    "Sampling",
    "UnknownProtocolError",
    "default_protocol",
    "resolve_protocol",
    "env_protocol",
    "get_protocol",
    "protocols_markdown",
]

PROTOCOL_SCHEMA_VERSION = 1
Mode = Literal["eval", "train"]

_PG = "HappynessI/Prefix_GRPO"
_VA = "langfengQ/verl-agent"
_PAPER = "Prefix-GRPO paper"


class UnknownProtocolError(ValueError):
    """A protocol name that does not exist, or one without a setup for the environment."""


@dataclass(frozen=True)
class Sampling:
    """Sampling of one reply: temperature, top-p, and the tokens a reply may have."""

    temperature: float
    top_p: float
    max_new_tokens: int


@dataclass(frozen=True)
class EnvProtocol:
    """One paper's setup on one environment.

    ``env_kwargs``: keywords ``agentenvs.make`` gets (the variant; ``max_turns`` comes from the
    turn limits). ``prompt``: a name in :data:`agentenvs.agents.prompts.NAMED_PROMPTS` (system prompt or
    template, reply format). ``admissible``: where the admissible actions reach the model
    (``none``, ``observation``: the environment's observation lists them, ``appended``: a line
    after every observation, ``template``: the template lists them). ``parser``: a name in
    :data:`agentenvs.agents.parsing.PARSERS`. ``unparseable``: ``feedback`` (answer with
    ``invalid_feedback``, the environment not stepped, the reply uses a turn) or ``project``
    (the parser's projection is stepped and the step counts as invalid). ``max_turns``:
    replies per episode in evaluation and in training. ``history``: steps of history in the
    prompt (None: every turn). ``invalid_penalty``: subtracted from the reward of a step whose
    reply broke the format (the trainer's). ``sources``: setting -> where it was read.
    """

    env_id: str
    env_kwargs: Mapping[str, Any]
    prompt: str
    admissible: Literal["none", "observation", "appended", "template"]
    parser: str
    unparseable: Literal["feedback", "project"]
    max_turns: Mapping[str, int]
    history: int | None
    sampling: Mapping[str, Sampling]
    invalid_penalty: float = 0.0
    invalid_feedback: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.unparseable not in ("feedback", "project"):
            raise ValueError(
                f"unparseable must be 'feedback' or 'project', not {self.unparseable!r}"
            )
        if (self.unparseable == "feedback") != bool(self.invalid_feedback):
            raise ValueError("invalid_feedback goes with unparseable='feedback' (and only with it)")
        for table in (self.max_turns, self.sampling):
            if set(table) != {"eval", "train"}:
                raise ValueError(
                    f"{self.env_id}: need 'eval' and 'train' entries, got {set(table)}"
                )

    def turns(self, mode: Mode) -> int:
        return int(self.max_turns[mode])

    def sampling_for(self, mode: Mode) -> Sampling:
        return self.sampling[mode]

    def settings(self, mode: Mode) -> dict[str, Any]:
        """The settings this setup fixes for ``mode`` (``eval`` or ``train``), JSON-ready."""
        return {
            "env_kwargs": dict(self.env_kwargs),
            "prompt": self.prompt,
            "admissible": self.admissible,
            "parser": self.parser,
            "unparseable": self.unparseable,
            "invalid_feedback": self.invalid_feedback or None,
            "max_turns": self.turns(mode),
            "history": self.history,
            **asdict(self.sampling_for(mode)),
            "invalid_penalty": self.invalid_penalty,
        }


@dataclass(frozen=True)
class Protocol:
    """One paper's protocol: its setup per environment."""

    name: str
    title: str
    envs: Mapping[str, EnvProtocol]

    def for_env(self, env_id: str) -> EnvProtocol:
        setup = self.envs.get(env_id)
        if setup is None:
            raise UnknownProtocolError(
                f"protocol {self.name!r} has no setup for {env_id}; it covers {sorted(self.envs)} "
                f"(protocols for {env_id}: {protocols_for(env_id)})"
            )
        return setup

    def to_json(self, mode: Mode = "eval") -> dict[str, Any]:
        return {
            "schema_version": PROTOCOL_SCHEMA_VERSION,
            "name": self.name,
            "title": self.title,
            "envs": {env: setup.settings(mode) for env, setup in self.envs.items()},
        }


# --------------------------------------------------------------------------------------------
# prefix-grpo (HappynessI/Prefix_GRPO, AgentGym servers)

_PG_FEEDBACK = (
    f"{_PG} verl/verl/interactions/agentgym_base_interaction.py generate_response: no action "
    "extracted -> return get_invalid_action_prompt() without stepping the environment; the "
    "evaluation loop (legacy_eval/eval/eval_*_vllm_server.py `for turn in range(max_rounds)`) "
    "counts the reply as a round"
)
_PG_HISTORY = (
    f"{_PG} legacy_eval/eval/eval_*_vllm_server.py: the whole message list is sent every turn "
    "(messages.append for every reply and observation)"
)

_PREFIX_GRPO = Protocol(
    "prefix-grpo",
    "Prefix-GRPO (AgentGym environments, HappynessI/Prefix_GRPO)",
    {
        "TextCraft-v0": EnvProtocol(
            "TextCraft-v0",
            env_kwargs={},
            prompt="textcraft-paper",
            admissible="none",
            parser="think_brackets",
            unparseable="feedback",
            invalid_feedback=TEXTCRAFT_INVALID_ACTION,
            max_turns={"eval": 30, "train": 30},
            history=None,
            sampling={"eval": Sampling(1.0, 1.0, 512), "train": Sampling(1.0, 1.0, 512)},
            sources={
                "env_kwargs": "TextCraft-v0 has no outcome-changing keyword (AgentGym's rules)",
                "prompt": f"{_PAPER} §7.4 TextCraft (system prompt, then the observation)",
                "admissible": "TextCraft has no admissible-action list (the observation shows "
                "the crafting commands)",
                "parser": f"{_PG} verl/verl/interactions/textcraft_action_parser.py "
                "extract_textcraft_action_loose: the last [[ ]], else the Action: line",
                "unparseable": _PG_FEEDBACK
                + "; textcraft_interaction.py get_invalid_action_prompt",
                "max_turns.eval": f"{_PG} legacy_eval/eval/run_textcraft_eval_vllm_server.sh "
                "MAX_ROUNDS=30 ('Official eval uses 30 interaction rounds')",
                "max_turns.train": f"{_PG} scripts/train/run_textcraft_grpo_train.sh "
                "MAX_ASSISTANT_TURNS=30",
                "history": _PG_HISTORY,
                "sampling.eval": f"{_PG} legacy_eval/eval/run_textcraft_eval_vllm_server.sh "
                "TEMPERATURE=1.0 TOP_P=1.0 MAX_NEW_TOKENS=512",
                "sampling.train": f"{_PG} scripts/train/run_textcraft_grpo_train.sh "
                "TEMPERATURE=1.0 TOP_P=1.0 ROLLOUT_MAX_TOKENS=512",
                "invalid_penalty": f"{_PG} config/*_train.yaml, scripts/train/*.sh: no "
                "invalid-action penalty (the reward is the environment's)",
            },
        ),
        "BabyAI-Text-v0": EnvProtocol(
            "BabyAI-Text-v0",
            env_kwargs={"rules": "agentgym"},
            prompt="babyai-paper",
            admissible="observation",
            parser="agentgym-babyai",
            unparseable="feedback",
            invalid_feedback=BABYAI_INVALID_ACTION,
            max_turns={"eval": 30, "train": 20},
            history=None,
            sampling={"eval": Sampling(1.0, 1.0, 2048), "train": Sampling(1.0, 1.0, 512)},
            sources={
                "env_kwargs": "AgentGym's BabyAI wrapper rules (docs/environments/"
                "BabyAI-Text-v0.md: rules='agentgym' reproduces it)",
                "prompt": f"{_PAPER} §7.4 BabyAI (system prompt, then the observation)",
                "admissible": "AgentGym's BabyAI observation ends with 'Available actions: "
                "[...]' (docs/environments/BabyAI-Text-v0.md)",
                "parser": f"{_PG} verl/verl/interactions/babyai_interaction.py extract_action: "
                "the last [[ ]], lower-cased",
                "unparseable": _PG_FEEDBACK + "; babyai_interaction.py get_invalid_action_prompt",
                "max_turns.eval": f"{_PG} legacy_eval/eval/run_babyai_eval_vllm_server.sh "
                "MAX_ROUNDS=30",
                "max_turns.train": f"{_PG} scripts/train/run_babyai_grpo_train.sh "
                "MAX_ASSISTANT_TURNS=20",
                "history": _PG_HISTORY,
                "sampling.eval": f"{_PG} legacy_eval/eval/run_babyai_eval_vllm_server.sh "
                "TEMPERATURE=1.0 TOP_P=1.0 MAX_NEW_TOKENS=2048",
                "sampling.train": f"{_PG} scripts/train/run_babyai_grpo_train.sh "
                "TEMPERATURE=1.0 TOP_P=1.0 ROLLOUT_MAX_TOKENS=512",
                "invalid_penalty": f"{_PG}: no invalid-action penalty",
            },
        ),
        "ALFWorld-v0": EnvProtocol(
            "ALFWorld-v0",
            env_kwargs={"game_version": "agentgym"},
            prompt="alfworld-agentgym",
            admissible="appended",
            parser="agentgym-alfworld",
            unparseable="feedback",
            invalid_feedback=ALFWORLD_INVALID_ACTION,
            max_turns={"eval": 50, "train": 20},
            history=None,
            sampling={"eval": Sampling(1.0, 1.0, 512), "train": Sampling(1.0, 0.95, 384)},
            sources={
                "env_kwargs": f"{_PG} envs/AgentGym/agentenv-alfworld (alfworld==0.3.3 games, "
                "process_ob): game_version='agentgym'",
                "prompt": f"{_PAPER} §7.4 ALFWorld (system prompt, fixed user message, then "
                "the observations)",
                "admissible": f"{_PG} verl/verl/interactions/alfworld_interaction.py "
                "_format_observation appends '\\nAVAILABLE ACTIONS: ' + ','.join(admissible) to "
                "every observation (the server returns them as available_actions)",
                "parser": f"{_PG} verl/verl/interactions/alfworld_interaction.py extract_action: "
                "<think> dropped, the first [[ ]], else Action:, else the last short line; "
                "lower-cased",
                "unparseable": _PG_FEEDBACK + "; alfworld_interaction.py get_invalid_action_prompt",
                "max_turns.eval": f"{_PG} legacy_eval/eval/eval_alfworld_vllm_server.py "
                "--max_rounds default 50 (ALFWorldInteraction.max_rounds = 50)",
                "max_turns.train": f"{_PG} scripts/train/run_alfworld_grpo_train.sh "
                "MAX_ASSISTANT_TURNS=20",
                "history": _PG_HISTORY,
                "sampling.eval": f"{_PG} legacy_eval/eval/eval_alfworld_vllm_server.py defaults "
                "--temperature 1.0 --top_p 1.0 --max_new_tokens 512",
                "sampling.train": f"{_PG} scripts/train/run_alfworld_grpo_train.sh "
                "TEMPERATURE=1.0 TOP_P=0.95 ROLLOUT_MAX_TOKENS=384",
                "invalid_penalty": f"{_PG}: no invalid-action penalty",
            },
        ),
    },
)


# --------------------------------------------------------------------------------------------
# ptgpo (verl-agent, as GiGPO and PTGPO run it)


def _va_sources(env: str, script: str, steps: int, extra: Mapping[str, str]) -> dict[str, str]:
    run = f"{_VA} examples/gigpo_trainer/{script}"
    return {
        "parser": f"{_VA} agent_system/environments/env_package/{env}/projection.py "
        f"{env}_projection",
        "unparseable": f"{_VA} agent_system/environments/env_manager.py "
        "*EnvironmentManager.step: every reply is projected and stepped "
        "(envs.step(actions)); info['is_action_valid'] = the projection's valid flag",
        "max_turns.eval": f"{run} env.max_steps={steps} (validation rollouts use the same "
        "env.max_steps)",
        "max_turns.train": f"{run} env.max_steps={steps}",
        "history": f"{_VA} verl/trainer/config/ppo_trainer.yaml env.history_length: 2 (the "
        "run scripts keep it)",
        "sampling.eval": f"{run} rollout.val_kwargs.temperature=0.4 do_sample=True; "
        "ppo_trainer.yaml val_kwargs.top_p: 1.0; data.max_response_length=512",
        "sampling.train": f"{_VA} verl/trainer/config/ppo_trainer.yaml rollout.temperature: "
        f"1.0, top_p: 1; {script} data.max_response_length=512",
        "invalid_penalty": f"{run} actor.invalid_action_penalty_coef=0.1; "
        "verl/trainer/ppo/ray_trainer.py apply_invalid_action_penalty subtracts it from the "
        "step's reward when is_action_valid is 0",
        **extra,
    }


_VA_SAMPLING = {"eval": Sampling(0.4, 1.0, 512), "train": Sampling(1.0, 1.0, 512)}

_PTGPO = Protocol(
    "ptgpo",
    "PTGPO / GiGPO (verl-agent environments and prompts)",
    {
        "ALFWorld-v0": EnvProtocol(
            "ALFWorld-v0",
            env_kwargs={"game_version": "alfworld-0.4", "reward_scale": 10.0},
            prompt="alfworld-verl-agent",
            admissible="template",
            parser="verl-agent-alfworld",
            unparseable="project",
            max_turns={"eval": 50, "train": 50},
            history=2,
            sampling=_VA_SAMPLING,
            invalid_penalty=0.1,
            sources=_va_sources(
                "alfworld",
                "run_alfworld.sh",
                50,
                {
                    "env_kwargs": f"{_VA} agent_system/environments/env_package/alfworld: "
                    "alfworld 0.4's games; envs.py compute_reward: 10.0 * won",
                    "prompt": f"{_VA} agent_system/environments/prompts/alfworld.py "
                    "ALFWORLD_TEMPLATE(_NO_HIS), one user message a step",
                    "admissible": f"{_VA} env_manager.py AlfWorldEnvironmentManager."
                    "build_text_obs: the admissible commands quoted, one a line, 'help' left out",
                },
            ),
        ),
        "WebShop-v0": EnvProtocol(
            "WebShop-v0",
            env_kwargs={"option_matching": "webshop"},
            prompt="webshop-verl-agent",
            admissible="template",
            parser="verl-agent-webshop",
            unparseable="project",
            max_turns={"eval": 15, "train": 15},
            history=2,
            sampling=_VA_SAMPLING,
            invalid_penalty=0.1,
            sources=_va_sources(
                "webshop",
                "run_webshop.sh",
                15,
                {
                    "env_kwargs": "WebShop's own get_reward (option_matching='webshop', the "
                    "original's option check)",
                    "prompt": f"{_VA} agent_system/environments/prompts/webshop.py "
                    "WEBSHOP_TEMPLATE(_NO_HIS), one user message a step",
                    "admissible": f"{_VA} env_manager.py WebshopEnvironmentManager."
                    "format_avail_actions: 'search[<your query>]' and the clickables",
                },
            ),
        ),
        "Sokoban-v0": EnvProtocol(
            "Sokoban-v0",
            env_kwargs={"grid_style": "verl-agent"},
            prompt="sokoban-verl-agent",
            admissible="template",
            parser="verl-agent-sokoban",
            unparseable="project",
            max_turns={"eval": 15, "train": 15},
            history=2,
            sampling=_VA_SAMPLING,
            invalid_penalty=0.1,
            sources=_va_sources(
                "sokoban",
                "run_sokoban.sh",
                15,
                {
                    "env_kwargs": f"{_VA} agent_system/environments/env_package/sokoban/"
                    "sokoban/env.py render('tiny_rgb_array'): the text grid verl-agent's text "
                    "mode shows (GiGPO's run_sokoban.sh trains the visual mode)",
                    "prompt": f"{_VA} agent_system/environments/prompts/sokoban.py "
                    "SOKOBAN_TEMPLATE(_NO_HIS), one user message a step",
                    "admissible": f"{_VA} prompts/sokoban.py: 'Your admissible actions are "
                    '["up", "down", "left", "right"]\'; a reply without one is action 0 '
                    "('still': reward -0.1, nothing moves; sokoban/env.py step)",
                },
            ),
        ),
    },
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (_PREFIX_GRPO, _PTGPO)}
"""Every protocol by name."""

DEFAULT_PROTOCOLS: dict[str, str] = {
    "TextCraft-v0": "prefix-grpo",
    "BabyAI-Text-v0": "prefix-grpo",
    "ALFWorld-v0": "ptgpo",
    "WebShop-v0": "ptgpo",
    "Sokoban-v0": "ptgpo",
}
"""Each environment's default protocol: the paper that reports on it."""


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; an unknown name is an error listing the valid ones."""
    protocol = PROTOCOLS.get(name)
    if protocol is None:
        hint = did_you_mean(name, PROTOCOLS)
        raise UnknownProtocolError(
            f"unknown protocol {name!r}; choose from {sorted(PROTOCOLS)}.{hint}"
        )
    return protocol


def protocols_for(env_id: str) -> list[str]:
    """The protocols that have a setup for ``env_id``."""
    return sorted(name for name, p in PROTOCOLS.items() if env_id in p.envs)


def default_protocol(env_id: str) -> str:
    """The default protocol's name for ``env_id`` (error for an environment without one)."""
    name = DEFAULT_PROTOCOLS.get(env_id)
    if name is None:
        raise UnknownProtocolError(
            f"no protocol is defined for {env_id!r}; protocols cover {sorted(DEFAULT_PROTOCOLS)}"
        )
    return name


def resolve_protocol(env_id: str, protocol: str | None) -> str | None:
    """The protocol a run of ``env_id`` plays: ``"default"`` is the environment's default (None
    for an environment without one), None is none, a name is checked (an unknown one, or one
    without a setup for ``env_id``, is an error listing the valid ones). The one place that
    resolves ``"default"``."""
    name = DEFAULT_PROTOCOLS.get(env_id) if protocol == "default" else protocol
    if name is not None:
        get_protocol(name).for_env(env_id)
    return name


def env_protocol(name: str | None, env_id: str) -> EnvProtocol:
    """The setup of protocol ``name`` (None: the default one) for ``env_id``."""
    return get_protocol(name if name is not None else default_protocol(env_id)).for_env(env_id)


# --------------------------------------------------------------------------------------------
# The documentation table

_ROWS = (
    ("env_kwargs", "env keywords", lambda s: _kw(s.env_kwargs)),
    ("prompt", "prompt", lambda s: f"`{s.prompt}`"),
    ("admissible", "admissible actions", lambda s: s.admissible),
    ("parser", "parser", lambda s: f"`{s.parser}`"),
    ("unparseable", "unparseable reply", lambda s: s.unparseable),
    ("max_turns.eval", "turns (eval)", lambda s: str(s.turns("eval"))),
    ("max_turns.train", "turns (train)", lambda s: str(s.turns("train"))),
    ("history", "history", lambda s: "all" if s.history is None else str(s.history)),
    ("sampling.eval", "sampling (eval)", lambda s: _samp(s.sampling_for("eval"))),
    ("sampling.train", "sampling (train)", lambda s: _samp(s.sampling_for("train"))),
    ("invalid_penalty", "invalid penalty", lambda s: f"{s.invalid_penalty:g}"),
)


def _kw(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"`{k}={v!r}`" for k, v in kwargs.items()) or "none"


def _samp(s: Sampling) -> str:
    return f"T={s.temperature:g}, top_p={s.top_p:g}, {s.max_new_tokens} tokens"


def protocols_markdown() -> str:
    """The settings table of every protocol and environment, each setting with its source
    (the table ``docs/protocols.md`` shows; a test keeps the two equal)."""
    lines = []
    for protocol in PROTOCOLS.values():
        lines += [f"### `{protocol.name}`: {protocol.title}", ""]
        for env_id, setup in protocol.envs.items():
            lines += [f"#### {env_id}", "", "| setting | value | source |", "|---|---|---|"]
            for key, label, value in _ROWS:
                source = setup.sources.get(key, "").replace("|", "\\|")
                lines.append(f"| {label} | {value(setup)} | {source} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
