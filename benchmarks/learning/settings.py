"""What the learning benchmark runs: one :class:`BenchSettings` per environment, and presets.

Tasks: training tasks come from the environment's ``train`` split, evaluation tasks from its
``test`` split (disjoint by construction: TextCraft's train split is every AgentGym id outside
the 100 test ids; Sokoban's are seeds below 2**16 and test seeds from 2**16). The evaluation
slice is sampled across families (TextCraft: depth bands) with a fixed stride, so it does not
depend on a seed. TextCraft keeps tasks the expert solves in at most ``max_expert_turns`` turns
(depth 1 and the shorter depth-2 goals), so that the turn limit can be met.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agentenvs.agents.tiny_model import TinyModelSpec
from agentenvs.benchmarks.learning.model import CHECK_MODEL

__all__ = [
    "ARMS",
    "ORACLE_ENVS",
    "PRESETS",
    "BenchSettings",
    "eval_task_ids",
    "preset",
    "rl_env_id",
    "rl_task_ids",
    "train_task_ids",
    "validation_task_ids",
]

SCHEMA_VERSION = 1
EVAL_SPLITS = ("test", "validation")
ARMS = ("sft", "random", "grpo", "gigpo", "ptgpo", "oracle", "prefix-grpo")
"""Every arm the benchmark knows: ``sft`` (the common start), ``random`` (the random agent on the
same evaluation tasks, no model), the RL arms from the SFT model, and ``oracle``: trained exactly
like ``grpo`` (same episode advantage, loss, budget and starts) plus the expert's true step credit
of each action (``info["step_credit"]``, docs/learning-check/oracle-arm.md), a control that shows
whether a testbed can reveal step credit at all."""

ORACLE_ENVS = {
    "Sokoban-v0": "Sokoban-oracle-v0",
    "KeyDoor-v0": "KeyDoor-v0",
    "KeyDoor-traps-v0": "KeyDoor-traps-v0",
    "KeyDoor-hidden-traps-v0": "KeyDoor-hidden-traps-v0",
}
"""The environment the ``oracle`` arm trains on: the benchmark's environment whose steps report
the expert's credit (the same tasks, observations and rewards)."""


@dataclass(frozen=True)
class BenchSettings:
    """Everything one benchmark run does (recorded in ``summary.json``)."""

    env_id: str = "TextCraft-v0"
    arms: tuple[str, ...] = ("sft", "grpo", "gigpo", "ptgpo", "prefix-grpo")
    seeds: tuple[int, ...] = (0, 1, 2)
    train_tasks: int = 160
    """Training tasks (SFT data, RL tasks, Prefix-GRPO's teacher trajectories)."""
    eval_per_family: dict[str, int] = field(default_factory=lambda: {"depth-1": 16, "depth-2": 8})
    """Held-out evaluation tasks per family, from the test split."""
    max_expert_turns: int | None = 4
    validation_tasks: int = 0
    """Train-split tasks after the training tasks, held apart for choosing settings (never
    trained on; :func:`validation_task_ids`)."""
    eval_split: str = "test"
    """Where the arms are evaluated: ``test`` (the held-out tasks, the benchmark's result) or
    ``validation`` (the validation tasks, for choosing settings without seeing ``test``)."""
    eval_offset: int = 0
    """The held-out tasks are each family's evenly spaced test-split sample shifted this many
    places (wrapping round), so that a later held-out run plays tasks no earlier run played."""
    model: TinyModelSpec = CHECK_MODEL
    sft_renamed_copies: int = 0
    """TextCraft: SFT also trains on this many item-renamed copies of each expert episode
    (:func:`agentenvs.benchmarks.learning.model.renamed_copies`)."""
    item_names: str = "train-tasks"
    """TextCraft: ``recipe-database``: every item name of the environment's recipe database is
    one token and the pool of :attr:`sft_renamed_copies`' names
    (:func:`agentenvs.benchmarks.learning.model.textcraft_item_names`); ``train-tasks``: item
    names are BPE text and the renamed copies draw from the training tasks' names."""
    sft_steps: int = 150
    sft_lr: float = 3e-3
    sft_batch_size: int = 8
    eval_k: int = 8
    eval_n: int = 16
    """Episodes per evaluation task (n >= k)."""
    max_turns: int = 5
    max_new_tokens: int = 32
    rl_max_commands: int | None = None
    """TextCraft: RL plays only the training tasks whose reset lists at most this many crafting
    commands (None: all of them); see :func:`rl_task_ids`."""
    rl_name_permutations: int = 0
    """TextCraft: RL plays each of its tasks under this many item-name permutations
    (``<task>/names-<k>``, k = 1..N, the same for every seed) instead of under its own names, so
    that an answer memorised in SFT earns nothing; 0: the tasks as they are."""
    rl_iterations: int = 20
    rl_prompts: int = 12
    rl_samples: int = 8
    rl_optimizer: str = "sgd"
    rl_lr: float = 0.4
    rl_schedule: str = "cosine"
    ppo_epochs: int = 2
    rl_mini_batches: int = 1
    arm_advantage: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Estimator settings per RL arm beyond its algorithm's defaults (``advantage.<key>`` of the
    trainer), e.g. ``{"oracle": {"step_weight": 0.1}}`` or ``{"ptgpo": {"root_spread":
    "outcome_gated"}}``; chosen on validation tasks and recorded with the run."""
    eval_every: int = 10
    """Evaluate each RL arm every N iterations (and at the end) for the curve."""
    threads: int = 1

    def __post_init__(self) -> None:
        if self.eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {EVAL_SPLITS}, got {self.eval_split!r}")
        if self.eval_split == "validation" and self.validation_tasks < 1:
            raise ValueError("eval_split='validation' needs validation_tasks >= 1")
        if self.eval_offset < 0:
            raise ValueError(f"eval_offset must be >= 0, got {self.eval_offset}")

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


TEXTCRAFT_MODEL = replace(CHECK_MODEL, vocab_size=4096)
"""The benchmark's TextCraft model: CHECK_MODEL with a 4096-token BPE vocabulary (plus one
token per item name with ``item_names="recipe-database"``)."""

TEXTCRAFT_RL: dict[str, Any] = {
    "rl_max_commands": 3,
    "rl_name_permutations": 16,
    "rl_optimizer": "adamw",
    "rl_lr": 3e-4,
    "rl_schedule": "constant",
}
"""TextCraft's RL setting (the ``textcraft`` and ``demo`` presets): the training tasks with at
most 3 recipes, each under 16 item-name permutations, AdamW 3e-4 at a constant rate."""

SOKOBAN: dict[str, Any] = {
    "env_id": "Sokoban-v0",
    "train_tasks": 2048,
    "eval_per_family": {"6x6-1box": 24},
    "max_expert_turns": None,
    "sft_steps": 1200,
    "sft_lr": 1e-3,
    "validation_tasks": 24,
    "max_turns": 15,
    "max_new_tokens": 24,
    "rl_iterations": 8,
    "rl_prompts": 8,
    "rl_samples": 8,
    "rl_optimizer": "adamw",
    "rl_lr": 3e-4,
    "rl_schedule": "constant",
    "eval_every": 4,
}
"""Sokoban's settings shared by the ``sokoban`` and ``sokoban-validation`` presets, chosen on the
validation rooms (docs/learning-check/README.md): 2,048 training rooms, SFT 1,200 steps of 8 at
AdamW 1e-3 (at 1e-2 the SFT model chose moves as the random agent does), turn limit 15
(verl-agent's), groups of 8 (8 rooms x 8 episodes an iteration), AdamW 3e-4 at a constant rate
for 8 iterations (at 16 every arm fell further below SFT), evaluated at 4 and 8."""

SOKOBAN_ORACLE: dict[str, Any] = {"step_weight": 1.0, "credit_scale": "anchor_centered"}
"""The oracle arm's credit on Sokoban, chosen on the validation rooms: uncentred credit lowered
every sampled reply, anchor-centred credit at weights 0.1 and 0.3 made the oracle's moves more
random; at weight 1 it held SFT's level (no setting tried beat GRPO by 2 SE)."""

SOKOBAN_EVAL_OFFSET = 2
"""The ``sokoban`` preset's held-out rooms are the test-split sample shifted 2 places: the first
Sokoban run (offset 0, 24 of the 100 test rooms) played every 4th or 5th room, so none of these
was played by any model before."""

SOKOBAN_PTGPO: dict[str, Any] = {"root_spread": "floored", "spread_floor": 1.0}
"""PTGPO's root spread on Sokoban's shaped rewards, chosen on the validation rooms: the paper's
std(G) + eps broke the policy (success 0 from iteration 4), ``outcome_gated`` ended 0.474 and
the spread floored at the box reward (1) 0.482, against GRPO's 0.508."""

KEYDOOR: dict[str, Any] = {
    "env_id": "KeyDoor-v0",
    "arms": ("sft", "random", "grpo", "gigpo", "ptgpo", "oracle"),
    "train_tasks": 256,
    "eval_per_family": {"2-keys": 12, "3-keys": 12},
    "max_expert_turns": None,
    "validation_tasks": 24,
    "sft_steps": 200,
    "sft_lr": 1e-2,
    "max_turns": 20,
    "max_new_tokens": 24,
    "rl_iterations": 16,
    "rl_prompts": 8,
    "rl_samples": 8,
    "rl_optimizer": "adamw",
    "rl_lr": 3e-4,
    "rl_schedule": "constant",
    "eval_every": 8,
}
"""The credit testbed's settings (``keydoor`` and ``keydoor-validation``): 256 training layouts
(the expert's episodes are the SFT data and RL plays the same layouts), 24 evaluation layouts
(12 with 2 keys, 12 with 3), turn limit 20, groups of 8, AdamW 3e-4 as Sokoban's (AdamW 1e-3
broke the reply format), 16 iterations evaluated at 8 and 16 (1,024 episodes an arm and seed: on
both validation seeds GRPO stopped gaining after about 8 iterations while the oracle arm kept
climbing; at 6 the oracle arm could not be told from GRPO)."""

KEYDOOR_ORACLE: dict[str, Any] = {"step_weight": 0.1, "credit_scale": "anchor_centered"}
"""The oracle arm's credit on KeyDoor, chosen on the validation layouts
(docs/learning-check/keydoor/plan.md): weights 0.3 and 1 broke the reply format or fell below
GRPO; uncentred credit lowered every sampled reply."""

PRESETS: dict[str, BenchSettings] = {
    # what was measured to transfer to held-out tasks (docs/learning-check/README.md): item
    # names as single tokens, 16 renamed copies per episode from the recipe database's names,
    # SFT at lr 1e-2 for 1600 steps; RL (every arm alike) on the training tasks with at most 3
    # recipes (on longer lists the SFT model never succeeds: every group's reward is 0), each
    # under 16 item-name permutations (no memorised answer earns a reward), AdamW 3e-4, 40
    # iterations
    "textcraft": BenchSettings(
        model=TEXTCRAFT_MODEL,
        item_names="recipe-database",
        sft_renamed_copies=16,
        sft_steps=1600,
        sft_lr=1e-2,
        **TEXTCRAFT_RL,
        rl_iterations=40,
        eval_every=20,
    ),
    # Sokoban from an SFT start that beats the random agent: every arm on the held-out rooms;
    # its settings come from "sokoban-validation" and are pre-registered in
    # docs/learning-check/sokoban-oracle/plan.md
    "sokoban": BenchSettings(
        **SOKOBAN,
        arms=("sft", "random", "grpo", "gigpo", "ptgpo", "oracle"),
        arm_advantage={"oracle": SOKOBAN_ORACLE, "ptgpo": SOKOBAN_PTGPO},
        eval_offset=SOKOBAN_EVAL_OFFSET,
    ),
    # Sokoban's settings chosen on validation rooms (never the test rooms): the oracle arm
    # against GRPO, SFT against the random agent, groups of 8 (gamma 0.95 in GiGPO and PTGPO)
    "sokoban-validation": BenchSettings(
        **SOKOBAN,
        arms=("sft", "random", "grpo", "oracle"),
        eval_split="validation",
    ),
    # the credit testbed (KeyDoor-v0, benchmarks/learning/keydoor.py): every arm, the held-out
    # layouts with held-out colour pairs; its settings come from "keydoor-validation" and are
    # pre-registered in docs/learning-check/keydoor-16/plan.md
    "keydoor": BenchSettings(**KEYDOOR, arm_advantage={"oracle": KEYDOOR_ORACLE}),
    "keydoor-validation": BenchSettings(
        **{**KEYDOOR, "arms": ("sft", "random", "grpo", "oracle"), "eval_split": "validation"}
    ),
    # the same on KeyDoor-traps-v0 (trap forks after the key: a loss no longer says which
    # decision lost it; docs/learning-check/keydoor.md)
    "keydoor-traps-validation": BenchSettings(
        **{
            **KEYDOOR,
            "env_id": "KeyDoor-traps-v0",
            "arms": ("sft", "random", "grpo", "oracle"),
            "eval_split": "validation",
        }
    ),
    # and on KeyDoor-hidden-traps-v0 (unmarked trap forks: a loss after the sign's key is
    # chance the key did not cause)
    "keydoor-hidden-traps-validation": BenchSettings(
        **{
            **KEYDOOR,
            "env_id": "KeyDoor-hidden-traps-v0",
            "arms": ("sft", "random", "grpo", "oracle"),
            "eval_split": "validation",
        }
    ),
    # a minute or two: every stage, two seeds, two RL arms, tiny shapes (make test)
    "smoke": BenchSettings(
        arms=("sft", "ptgpo", "prefix-grpo"),
        seeds=(0, 1),
        train_tasks=12,
        eval_per_family={"depth-1": 2, "depth-2": 1},
        model=replace(
            CHECK_MODEL,
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
        ),
        item_names="recipe-database",
        sft_renamed_copies=1,
        rl_name_permutations=2,
        sft_steps=40,
        eval_n=8,
        max_turns=3,
        max_new_tokens=24,
        rl_iterations=2,
        rl_prompts=3,
        rl_samples=4,
        eval_every=1,
    ),
    # the demo's main job: SFT and Prefix-GRPO on TextCraft, held-out tasks, a few minutes
    "demo": BenchSettings(
        arms=("sft", "prefix-grpo"),
        seeds=(0,),
        train_tasks=48,
        eval_per_family={"depth-1": 8, "depth-2": 4},
        model=TEXTCRAFT_MODEL,
        item_names="recipe-database",
        sft_renamed_copies=8,
        sft_steps=600,
        sft_lr=1e-2,
        **TEXTCRAFT_RL,  # as in "textcraft", on fewer tasks and iterations
        rl_iterations=10,
        rl_prompts=8,
        eval_every=5,
    ),
}


def preset(name: str, **overrides: Any) -> BenchSettings:
    """A preset with some fields replaced; a dict for the ``model`` field replaces only the
    shape's fields it names (``{"hidden_size": 256}``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    base = PRESETS[name]
    if isinstance(overrides.get("model"), dict):
        try:
            overrides["model"] = replace(base.model, **overrides["model"])
        except TypeError as exc:
            raise ValueError(f"model: {exc} (fields of {type(base.model).__name__})") from None
    return replace(base, **overrides)


def _expert_turns(env_id: str, task_ids: list[str]) -> dict[str, int]:
    from agentenvs.benchmarks.learning.model import expert_trajectories

    return {t.task_id: t.turns for t in expert_trajectories(env_id, task_ids) if t.won}


def _eligible_train_ids(settings: BenchSettings, count: int) -> list[str]:
    """The first ``count`` train-split tasks (those the expert solves within
    ``max_expert_turns``, when set), in the split's order."""
    from agentenvs.registration import build_env

    ids = build_env(settings.env_id).task_ids("train")
    if settings.max_expert_turns is None:
        return ids[:count]
    pool = ids[: count * 4]
    turns = _expert_turns(settings.env_id, pool)
    kept = [t for t in pool if turns.get(t, 10**9) <= settings.max_expert_turns]
    return kept[:count]


def train_task_ids(settings: BenchSettings) -> list[str]:
    """The first ``train_tasks`` train-split tasks (those the expert solves within
    ``max_expert_turns``, when set), in the split's order."""
    return _eligible_train_ids(settings, settings.train_tasks)


def validation_task_ids(settings: BenchSettings) -> list[str]:
    """The validation tasks (settings are chosen on them; never trained on, never in the test
    split): an environment with a ``validation`` split (KeyDoor-v0) gives them from it, spread
    over the families as the test tasks are; else the ``validation_tasks`` eligible train-split
    tasks right after the training tasks (Sokoban: train seeds 256-279)."""
    from agentenvs.registration import env_class

    if "validation" in env_class(settings.env_id).splits:
        return _family_sample(settings, "validation", settings.validation_tasks)
    count = settings.train_tasks + settings.validation_tasks
    ids = _eligible_train_ids(settings, count)[settings.train_tasks :]
    if len(ids) < settings.validation_tasks:
        raise ValueError(
            f"{settings.env_id}: only {len(ids)} eligible train-split tasks after the "
            f"{settings.train_tasks} training tasks, {settings.validation_tasks} asked"
        )
    return ids


def rl_task_ids(settings: BenchSettings, train_ids: list[str]) -> list[str]:
    """RL's tasks: ``train_ids`` (the SFT tasks), TextCraft's filtered to at most
    ``rl_max_commands`` crafting commands and played under ``rl_name_permutations``
    permutations of the item names (each task's permutations in turn, then the next task)."""
    if settings.rl_max_commands is None and not settings.rl_name_permutations:
        return list(train_ids)
    if settings.env_id != "TextCraft-v0":
        raise ValueError("rl_max_commands / rl_name_permutations are TextCraft settings")
    from agentenvs.textcraft import TextCraftEnv
    from agentenvs.textcraft.renaming import renamed_task_id

    env = TextCraftEnv()
    ids = list(train_ids)
    if settings.rl_max_commands is not None:
        ids = [t for t in ids if len(env.task(t).commands) <= settings.rl_max_commands]
    if settings.rl_name_permutations:
        permutations = range(1, settings.rl_name_permutations + 1)
        ids = [renamed_task_id(t, k) for t in ids for k in permutations]
    if not ids:
        raise ValueError(f"no training task has at most {settings.rl_max_commands} commands")
    return ids


def eval_task_ids(settings: BenchSettings) -> list[str]:
    """The tasks the arms are evaluated on: with ``eval_split="validation"`` the validation
    tasks; else held-out test-split tasks, ``eval_per_family[f]`` of family ``f``, evenly
    spaced over that family's eligible tasks (fixed, seed-independent)."""
    if settings.eval_split == "validation":
        return validation_task_ids(settings)
    return _family_sample(settings, "test", offset=settings.eval_offset)


def _family_sample(
    settings: BenchSettings, split: str, total: int | None = None, offset: int = 0
) -> list[str]:
    """``eval_per_family[f]`` eligible tasks of family ``f`` of ``split``, evenly spaced (fixed,
    seed-independent) and shifted ``offset`` places; ``total``: that many in all, in the same
    proportions."""
    from agentenvs.registration import build_env

    env = build_env(settings.env_id)
    ids = env.task_ids(split)
    turns = _expert_turns(settings.env_id, ids) if settings.max_expert_turns is not None else None
    out = []
    per_family = dict(settings.eval_per_family)
    if total is not None:
        whole = sum(per_family.values())
        per_family = {f: max(1, round(total * c / whole)) for f, c in per_family.items()}
    for family, count in per_family.items():
        pool = [t for t in ids if env.family(t) == family]
        if turns is not None:
            pool = [t for t in pool if turns.get(t, 10**9) <= settings.max_expert_turns]
        if len(pool) < count:
            raise ValueError(f"{settings.env_id}: only {len(pool)} eligible {family} {split} tasks")
        step = len(pool) / count
        out += [pool[(int(i * step) + offset) % len(pool)] for i in range(count)]
    return out


def rl_env_id(settings: BenchSettings, arm: str) -> str:
    """The environment an RL arm trains on: :data:`ORACLE_ENVS`' for ``oracle``, else the
    benchmark's."""
    if arm != "oracle":
        return settings.env_id
    if settings.env_id not in ORACLE_ENVS:
        raise ValueError(f"the oracle arm has no step credit for {settings.env_id}")
    return ORACLE_ENVS[settings.env_id]
