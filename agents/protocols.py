"""Benchmark protocols as data: each paper's evaluation and training setup, per environment.

A number is comparable with a published one only when the whole setup matches: the environment
variant, the prompt, how a reply is parsed and what happens when it cannot be, the turn limits,
the history window and the sampling. A :class:`Protocol` holds one paper's setup for each
environment it reports on (:class:`EnvProtocol`); every setting cites where it was read
(:attr:`EnvProtocol.sources`, rendered as the table of ``docs/protocols.md`` by
:func:`agentenvs.agents.protocol_docs.protocols_markdown`). The setups are one table, a row per
protocol and environment with its provenance in the last column.

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

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentenvs.agents.prompts.alfworld import ALFWORLD_INVALID_ACTION
from agentenvs.agents.prompts.babyai import BABYAI_INVALID_ACTION
from agentenvs.agents.prompts.textcraft import TEXTCRAFT_INVALID_ACTION
from agentenvs.plugins import (
    LiveTable,
    PluginError,
    PluginWarning,
    load_part,
    plugins,
    source,
)
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
    turn limits). ``prompt``: a name in :data:`agentenvs.agents.prompts.NAMED_PROMPTS` (system
    prompt or template, reply format). ``admissible``: where the admissible actions reach the model
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
# Provenance: where each setting was read (the last column of the table below)


def _pg_sources(
    name: str,
    *,
    turns: tuple[str, str],
    sampling: tuple[str, str],
    parser: str,
    **settings: str,
) -> dict[str, str]:
    """A Prefix-GRPO setup's sources in HappynessI/Prefix_GRPO: its ``name`` interaction,
    where the eval and the training turn limits and sampling were read (``turns``,
    ``sampling``: (eval, train), a script and its variables), what the interaction's action
    parser does, and the environment's own ``settings`` (``env_kwargs``, ``prompt``,
    ``admissible``)."""
    return {
        **settings,
        "parser": f"{_PG} verl/verl/interactions/{parser}",
        "unparseable": _PG_FEEDBACK + f"; {name}_interaction.py get_invalid_action_prompt",
        "max_turns.eval": f"{_PG} {turns[0]}",
        "max_turns.train": f"{_PG} {turns[1]}",
        "history": _PG_HISTORY,
        "sampling.eval": f"{_PG} {sampling[0]}",
        "sampling.train": f"{_PG} {sampling[1]}",
        "invalid_penalty": f"{_PG}: no invalid-action penalty",
    }


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

_PG_TEXTCRAFT = {
    **_pg_sources(
        "textcraft",
        turns=(
            "legacy_eval/eval/run_textcraft_eval_vllm_server.sh MAX_ROUNDS=30 ('Official eval "
            "uses 30 interaction rounds')",
            "scripts/train/run_textcraft_grpo_train.sh MAX_ASSISTANT_TURNS=30",
        ),
        sampling=(
            "legacy_eval/eval/run_textcraft_eval_vllm_server.sh TEMPERATURE=1.0 TOP_P=1.0 "
            "MAX_NEW_TOKENS=512",
            "scripts/train/run_textcraft_grpo_train.sh TEMPERATURE=1.0 TOP_P=1.0 "
            "ROLLOUT_MAX_TOKENS=512",
        ),
        parser="textcraft_action_parser.py extract_textcraft_action_loose: the last [[ ]], else "
        "the Action: line",
        env_kwargs="TextCraft-v0 has no outcome-changing keyword (AgentGym's rules)",
        prompt=f"{_PAPER} §7.4 TextCraft (system prompt, then the observation)",
        admissible="TextCraft has no admissible-action list (the observation shows the crafting "
        "commands)",
    ),
    "invalid_penalty": f"{_PG} config/*_train.yaml, scripts/train/*.sh: no invalid-action "
    "penalty (the reward is the environment's)",
}
_PG_BABYAI = _pg_sources(
    "babyai",
    turns=(
        "legacy_eval/eval/run_babyai_eval_vllm_server.sh MAX_ROUNDS=30",
        "scripts/train/run_babyai_grpo_train.sh MAX_ASSISTANT_TURNS=20",
    ),
    sampling=(
        "legacy_eval/eval/run_babyai_eval_vllm_server.sh TEMPERATURE=1.0 TOP_P=1.0 "
        "MAX_NEW_TOKENS=2048",
        "scripts/train/run_babyai_grpo_train.sh TEMPERATURE=1.0 TOP_P=1.0 ROLLOUT_MAX_TOKENS=512",
    ),
    parser="babyai_interaction.py extract_action: the last [[ ]], lower-cased",
    env_kwargs="AgentGym's BabyAI wrapper rules (docs/environments/BabyAI-Text-v0.md: "
    "rules='agentgym' reproduces it)",
    prompt=f"{_PAPER} §7.4 BabyAI (system prompt, then the observation)",
    admissible="AgentGym's BabyAI observation ends with 'Available actions: [...]' "
    "(docs/environments/BabyAI-Text-v0.md)",
)
_PG_ALFWORLD = _pg_sources(
    "alfworld",
    turns=(
        "legacy_eval/eval/eval_alfworld_vllm_server.py --max_rounds default 50 "
        "(ALFWorldInteraction.max_rounds = 50)",
        "scripts/train/run_alfworld_grpo_train.sh MAX_ASSISTANT_TURNS=20",
    ),
    sampling=(
        "legacy_eval/eval/eval_alfworld_vllm_server.py defaults --temperature 1.0 --top_p 1.0 "
        "--max_new_tokens 512",
        "scripts/train/run_alfworld_grpo_train.sh TEMPERATURE=1.0 TOP_P=0.95 "
        "ROLLOUT_MAX_TOKENS=384",
    ),
    parser="alfworld_interaction.py extract_action: <think> dropped, the first [[ ]], else "
    "Action:, else the last short line; lower-cased",
    env_kwargs=f"{_PG} envs/AgentGym/agentenv-alfworld (alfworld==0.3.3 games, process_ob): "
    "game_version='agentgym'",
    prompt=f"{_PAPER} §7.4 ALFWorld (system prompt, fixed user message, then the observations)",
    admissible=f"{_PG} verl/verl/interactions/alfworld_interaction.py _format_observation "
    "appends '\\nAVAILABLE ACTIONS: ' + ','.join(admissible) to every observation (the server "
    "returns them as available_actions)",
)


def _va_sources(env: str, script: str, steps: int, **settings: str) -> dict[str, str]:
    """A verl-agent setup's sources: ``env``'s projection and environment manager, the GiGPO
    run ``script`` with ``env.max_steps=steps``, and the environment's own ``settings``."""
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
        **settings,
    }


_VA_ALFWORLD = _va_sources(
    "alfworld",
    "run_alfworld.sh",
    50,
    env_kwargs=f"{_VA} agent_system/environments/env_package/alfworld: alfworld 0.4's games; "
    "envs.py compute_reward: 10.0 * won",
    prompt=f"{_VA} agent_system/environments/prompts/alfworld.py ALFWORLD_TEMPLATE(_NO_HIS), "
    "one user message a step",
    admissible=f"{_VA} env_manager.py AlfWorldEnvironmentManager.build_text_obs: the "
    "admissible commands quoted, one a line, 'help' left out",
)
_VA_WEBSHOP = _va_sources(
    "webshop",
    "run_webshop.sh",
    15,
    env_kwargs="WebShop's own get_reward (option_matching='webshop', the original's option check)",
    prompt=f"{_VA} agent_system/environments/prompts/webshop.py WEBSHOP_TEMPLATE(_NO_HIS), one "
    "user message a step",
    admissible=f"{_VA} env_manager.py WebshopEnvironmentManager.format_avail_actions: "
    "'search[<your query>]' and the clickables",
)
_VA_SOKOBAN = _va_sources(
    "sokoban",
    "run_sokoban.sh",
    15,
    env_kwargs=f"{_VA} agent_system/environments/env_package/sokoban/sokoban/env.py "
    "render('tiny_rgb_array'): the text grid verl-agent's text mode shows (GiGPO's "
    "run_sokoban.sh trains the visual mode)",
    prompt=f"{_VA} agent_system/environments/prompts/sokoban.py SOKOBAN_TEMPLATE(_NO_HIS), one "
    "user message a step",
    admissible=f'{_VA} prompts/sokoban.py: \'Your admissible actions are ["up", "down", '
    '"left", "right"]\'; a reply without one is action 0 (\'still\': reward -0.1, nothing '
    "moves; sokoban/env.py step)",
)


# --------------------------------------------------------------------------------------------
# The table: one row per protocol and environment

_T1 = Sampling(1.0, 1.0, 512)  # temperature 1, top-p 1, 512 tokens
_VA_EVAL = Sampling(0.4, 1.0, 512)  # verl-agent's validation sampling
_TITLES = {
    "prefix-grpo": "Prefix-GRPO (AgentGym environments, HappynessI/Prefix_GRPO)",
    "ptgpo": "PTGPO / GiGPO (verl-agent environments and prompts)",
}
# fmt: off
# protocol, env id, env keywords, prompt, admissible, parser, unparseable (its feedback text, or
# None: project), turns (eval, train), history, sampling (eval, train), invalid penalty, sources
_TABLE: tuple[tuple[Any, ...], ...] = (
    ("prefix-grpo", "TextCraft-v0", {}, "textcraft-paper", "none", "think_brackets",
     TEXTCRAFT_INVALID_ACTION, (30, 30), None, (_T1, _T1), 0.0, _PG_TEXTCRAFT),
    ("prefix-grpo", "BabyAI-Text-v0", {"rules": "agentgym"}, "babyai-paper", "observation",
     "agentgym-babyai", BABYAI_INVALID_ACTION, (30, 20), None,
     (Sampling(1.0, 1.0, 2048), _T1), 0.0, _PG_BABYAI),
    ("prefix-grpo", "ALFWorld-v0", {"game_version": "agentgym"}, "alfworld-agentgym", "appended",
     "agentgym-alfworld", ALFWORLD_INVALID_ACTION, (50, 20), None,
     (_T1, Sampling(1.0, 0.95, 384)), 0.0, _PG_ALFWORLD),
    ("ptgpo", "ALFWorld-v0", {"game_version": "alfworld-0.4", "reward_scale": 10.0},
     "alfworld-verl-agent", "template", "verl-agent-alfworld", None, (50, 50), 2, (_VA_EVAL, _T1),
     0.1, _VA_ALFWORLD),
    ("ptgpo", "WebShop-v0", {"option_matching": "webshop"}, "webshop-verl-agent", "template",
     "verl-agent-webshop", None, (15, 15), 2, (_VA_EVAL, _T1), 0.1, _VA_WEBSHOP),
    ("ptgpo", "Sokoban-v0", {"grid_style": "verl-agent"}, "sokoban-verl-agent", "template",
     "verl-agent-sokoban", None, (15, 15), 2, (_VA_EVAL, _T1), 0.1, _VA_SOKOBAN),
)
# fmt: on


def _setup(row: tuple[Any, ...]) -> EnvProtocol:
    """One row of :data:`_TABLE` as an :class:`EnvProtocol`."""
    (_, env_id, kwargs, prompt, admissible, parser, feedback, turns, history, sampling, penalty,
     sources) = row  # fmt: skip
    return EnvProtocol(
        env_id,
        env_kwargs=kwargs,
        prompt=prompt,
        admissible=admissible,
        parser=parser,
        unparseable="project" if feedback is None else "feedback",
        invalid_feedback=feedback or "",
        max_turns=dict(zip(("eval", "train"), turns, strict=True)),
        history=history,
        sampling=dict(zip(("eval", "train"), sampling, strict=True)),
        invalid_penalty=penalty,
        sources=sources,
    )


def _env_protocols(env_id: str) -> tuple[Protocol, ...]:
    """The protocols of :data:`_TABLE` with a setup for ``env_id``, each holding that setup
    alone (what an environment plugin's ``protocols`` names)."""
    return tuple(
        Protocol(name, title, {env_id: _setup(row)})
        for name, title in _TITLES.items()
        for row in _TABLE
        if row[0] == name and row[1] == env_id
    )


# Each of our environments' protocols, named by its plugin (agentenvs/<env>/plugin.py).
TEXTCRAFT = _env_protocols("TextCraft-v0")
BABYAI = _env_protocols("BabyAI-Text-v0")
ALFWORLD = _env_protocols("ALFWorld-v0")
WEBSHOP = _env_protocols("WebShop-v0")
SOKOBAN = _env_protocols("Sokoban-v0")


def _plugin_protocols() -> dict[str, Protocol]:
    """Every plugin's protocols merged by name (a protocol covers the environments whose
    plugins give a setup under its name; its title is the first plugin's)."""
    merged: dict[str, Protocol] = {}
    for env_id in plugins():
        try:
            found = _protocols_of(env_id)
        except PluginError as exc:  # that environment alone has no protocol; it says why on use
            warnings.warn(str(exc), PluginWarning, stacklevel=2)
            continue
        for protocol in found:
            known = merged.get(protocol.name)
            envs = {**(known.envs if known else {}), env_id: protocol.envs[env_id]}
            merged[protocol.name] = Protocol(protocol.name, (known or protocol).title, envs)
    return merged


def _protocols_of(env_id: str) -> tuple[Protocol, ...]:
    """``env_id``'s plugin's protocols, checked: each a :class:`Protocol` whose only setup is
    for ``env_id`` (a :class:`~agentenvs.plugins.PluginError` naming the distribution else)."""
    found = load_part(env_id, "protocols")
    if found is None:
        return ()
    protocols = tuple(found) if isinstance(found, (list, tuple)) else (found,)
    for protocol in protocols:
        if not isinstance(protocol, Protocol) or set(protocol.envs) != {env_id}:
            raise PluginError(
                f"environment plugin {env_id!r} ({source(env_id)}) is broken: its protocols "
                f"must be Protocol objects with one setup, for {env_id}; got {protocol!r}"
            )
    return protocols


PROTOCOLS: LiveTable[str, Protocol] = LiveTable(_plugin_protocols, "protocols")
"""Every protocol by name (from the environment plugins' ``protocols``)."""

DEFAULT_PROTOCOLS: LiveTable[str, str] = LiveTable(
    lambda: {e: p.default_protocol for e, p in plugins().items() if p.default_protocol},
    "default protocols",
)
"""Each environment's default protocol (its plugin's ``default_protocol``): for ours, the paper
that reports on it."""


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
    _check_plugin(env_id)
    name = DEFAULT_PROTOCOLS.get(env_id) if protocol == "default" else protocol
    if name is not None:
        get_protocol(name).for_env(env_id)
    return name


def env_protocol(name: str | None, env_id: str) -> EnvProtocol:
    """The setup of protocol ``name`` (None: the default one) for ``env_id``."""
    _check_plugin(env_id)
    return get_protocol(name if name is not None else default_protocol(env_id)).for_env(env_id)


def _check_plugin(env_id: str) -> None:
    """Raise the :class:`~agentenvs.plugins.PluginError` of ``env_id``'s protocols when they do
    not load (the protocol tables leave that environment out)."""
    if env_id in plugins():
        _protocols_of(env_id)
