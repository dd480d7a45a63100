"""Which action gets the credit? GRPO, GiGPO and PTGPO on a Sokoban group where the outcome is
decided by a later action, not by the shared first one (no training).

    python -m agentenvs.benchmarks.learning.credit --out docs/learning-check/credit.md

The group is eight scripted episodes of one real room (``Sokoban-v0``, task ``seed/601``, the
training protocol's grid, the benchmark's turn limit of 10), played through the environment, so
every anchor observation and reward is the environment's own::

    ######      start: the player P below-left of the box X, the target O at the left
    #____#
    #O___#      t=0      every episode steps ``right`` (the shared action)
    #__X_#      t=1..3   four go ``up, left, up`` (pushing the box up a row), four go
    ##P__#               ``right, up, left`` (pushing it left): different states
    ######      t=4      the decisive action, in each route's own state: the winners walk on
                         and push the box home (solved at their 10th action), the losers push it
                         against a wall or into a corner where it can never reach the target
                         (the same five moves follow until the turn limit)

Each route holds two winners and two losers, so neither the shared push nor the route says
anything about the outcome; only the action at t=5 does. The credit of a row is what its
estimator adds to the group's outcome advantage: GRPO none (every row of an episode has the
same advantage), GiGPO ``A_step`` (omega x (G_t - mean G over the anchor-state group)), PTGPO
``A^PT`` (omega x the prefix-tree credits). The estimators run as the trainer runs them:
:func:`agentenvs.train.rl.batch.compute_advantages` on training rows, with each algorithm's
default settings (:meth:`agentenvs.train.rl.RLConfig.estimator_settings`).

A second group (:func:`play_lost_group`) has no winner: four episodes of the same room that all
lose, where the returns differ only through the -0.1 step penalty and the discount. Two walk to
the route ``up``'s decision state at t=4 and take a safe move there, but a later bump into the
wall leaves them one move short of solving; two bump into the wall first, reach the decision
state at t=5 and push the box against the wall there (the fatal push). From the decision state
the fatal pushers have one step fewer left to pay, so their discounted return is higher, and
PTGPO's equations divide that timing difference by the root's tiny return spread: the fatal
push gets large positive credit. The table shows it beside PTGPO's ``root_spread`` options for
shaped rewards (``outcome_gated``: no tree credit where every episode has one outcome;
``floored``: the spread floored at the reward's scale).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CREDIT_ALGOS",
    "DECISIVE_STEP",
    "EPISODE_SCRIPTS",
    "ROOM",
    "SHARED_STEP",
    "FATAL_STEP",
    "LOST_GROUP_SCRIPTS",
    "LOST_GROUP_VARIANTS",
    "SAFE_STEP",
    "CreditEpisode",
    "credit_table",
    "estimator_credits",
    "lost_group_table",
    "main",
    "play_group",
    "play_lost_group",
]

ROOM = "seed/601"
"""The training room the group plays (``Sokoban-v0``, 6x6, one box)."""
MAX_TURNS = 10
"""The turn limit (the benchmark's): a winner solves at its 10th action, a loser is truncated."""
SHARED = ("right",)
ROUTES = {"up": ("up", "left", "up"), "right": ("right", "up", "left")}
"""The moves after the shared one, per route (each route ends in its own decision state)."""
WIN = {
    "up": ("up", "right", "right", "down", "left", "left"),
    "right": ("down", "left", "up", "right", "up", "left"),
}
"""The winners' moves from the decision state (a shortest solution)."""
LOSE = {"up": ("right",), "right": ("left",)}
"""The losers' decisive push (it makes the room unsolvable)."""
AFTER_LOSING = ("up", "right", "down", "down", "up")
SHARED_STEP = 0
"""The step of the shared action."""
DECISIVE_STEP = len(SHARED) + 3
"""The step of the decisive action (4)."""
EPISODE_SCRIPTS: tuple[tuple[str, str, tuple[str, ...]], ...] = tuple(
    (
        route,
        outcome,
        SHARED + ROUTES[route] + (WIN[route] if outcome == "win" else LOSE[route] + AFTER_LOSING),
    )
    for route in ROUTES
    for outcome in ("win", "lose", "win", "lose")
)
"""(route, outcome, actions) of the eight episodes: per route two winners and two losers."""
CREDIT_ALGOS = ("grpo", "gigpo", "ptgpo")

BUMP = {"up": "up", "start": "down"}
"""A move into the wall (it consumes a turn and changes nothing): from the cell above the
decision state (route up), and from the cell after the shared move."""
LOST_GROUP_SCRIPTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("safe", "lose", SHARED + ROUTES["up"] + WIN["up"][:1] + (BUMP["up"],) + WIN["up"][1:5]),
    ("fatal", "lose", SHARED + (BUMP["start"],) + ROUTES["up"] + LOSE["up"] + AFTER_LOSING[:4]),
) * 2
"""(kind, outcome, actions) of the all-lose group: the safe episodes reach the decision state at
t=4 and step ``up`` (the plan's first move), bump into the wall and run out of turns one push
short; the fatal ones bump first, reach it at t=5 and push the box against the wall."""
SAFE_STEP = len(SHARED) + 3
"""The safe episodes' step at the decision state (4)."""
FATAL_STEP = SAFE_STEP + 1
"""The fatal episodes' step at the decision state: the fatal push (5)."""
LOST_GROUP_VARIANTS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("grpo", "grpo", {}),
    ("gigpo", "gigpo", {}),
    ("ptgpo (paper)", "ptgpo", {}),
    ("ptgpo outcome_gated", "ptgpo", {"root_spread": "outcome_gated"}),
    ("ptgpo floored at 1", "ptgpo", {"root_spread": "floored", "spread_floor": 1.0}),
)
"""(label, algo, advantage settings) of the all-lose table; the floor 1 is the reward of a box
reaching a target, the smallest reward that is an outcome rather than a step penalty."""


@dataclass(frozen=True)
class CreditEpisode:
    """One played episode: the anchor observation, action and reward of every step."""

    route: str
    outcome: str
    anchors: tuple[str, ...]
    actions: tuple[str, ...]
    rewards: tuple[float, ...]
    won: bool


def play_group(
    room: str = ROOM,
    scripts: Sequence[tuple[str, str, tuple[str, ...]]] = EPISODE_SCRIPTS,
) -> list[CreditEpisode]:
    """The scripted episodes of ``room`` (default: the eight of :data:`EPISODE_SCRIPTS`), played
    through ``Sokoban-v0`` with the training protocol's environment settings; an episode whose
    outcome is not the scripted one is an error (the room or the environment changed)."""
    from agentenvs.agents.protocols import env_protocol
    from agentenvs.registration import make

    kwargs = dict(env_protocol(None, "Sokoban-v0").env_kwargs)
    env = make("Sokoban-v0", max_turns=MAX_TURNS, **kwargs)
    episodes = []
    for route, outcome, actions in scripts:
        observation, _ = env.reset(options={"task_id": room})
        anchors, rewards = [], []
        done = won = False
        for action in actions:
            if done:
                raise RuntimeError(f"{room}: the episode ended before its scripted {action!r}")
            anchors.append(observation)
            observation, reward, terminated, truncated, info = env.step(action)
            rewards.append(float(reward))
            done, won = terminated or truncated, bool(info.get("won"))
        if not done or won != (outcome == "win"):
            raise RuntimeError(f"{room}: a scripted {outcome} ({route}) ended won={won}")
        episodes.append(CreditEpisode(route, outcome, tuple(anchors), actions, tuple(rewards), won))
    env.close()
    return episodes


def play_lost_group(room: str = ROOM) -> list[CreditEpisode]:
    """The four episodes of :data:`LOST_GROUP_SCRIPTS` (all lose), played like
    :func:`play_group`."""
    return play_group(room, LOST_GROUP_SCRIPTS)


def estimator_credits(
    episodes: Sequence[CreditEpisode], algo: str, **settings: object
) -> tuple[list[list[float]], list[list[float]]]:
    """(advantage, credit) per episode and step under ``algo``'s estimator with its default
    settings and ``settings`` (``advantage.*``, e.g. ``root_spread``), computed by the trainer's
    :func:`~agentenvs.train.rl.batch.compute_advantages` on one group of training rows; credit =
    advantage minus the episode's outcome part (GRPO's form for GRPO and PTGPO, ``R - mean R``
    for GiGPO's default ``normalize="mean"``)."""
    from agentenvs.train.rl import RLConfig
    from agentenvs.train.rl.batch import StepRow, compute_advantages
    from agentenvs.train.rl.config import AdvantageSettings, DataSettings

    config = RLConfig(
        algo=algo,
        data=DataSettings(env_id="Sokoban-v0"),
        advantage=AdvantageSettings(**settings),  # type: ignore[arg-type]
    )
    rows = [
        StepRow(
            prompt_ids=[0],
            response_ids=[1, 2],
            rollout_log_probs=[0.0, 0.0],
            reward=reward,
            group_id=ROOM,
            episode_id=f"episode-{i}",
            step_index=t,
            anchor=anchor,
            action=action,
            episode_won=ep.won,
            episode_reward=sum(ep.rewards),
        )
        for i, ep in enumerate(episodes)
        for t, (anchor, action, reward) in enumerate(
            zip(ep.anchors, ep.actions, ep.rewards, strict=True)
        )
    ]
    compute_advantages(rows, config.spec.estimator, config.estimator_settings())
    outcome = _outcome_part(episodes, config.estimator_settings().get("normalize", "std"))
    advantages: list[list[float]] = [[] for _ in episodes]
    credits: list[list[float]] = [[] for _ in episodes]
    for row in rows:
        assert row.advantages is not None
        i = int(row.episode_id.split("-")[1])
        value = float(row.advantages[0])
        advantages[i].append(value)
        credits[i].append(value - outcome[i])
    return advantages, credits


def _outcome_part(episodes: Sequence[CreditEpisode], normalize: str) -> list[float]:
    """Each episode's outcome advantage: (R - mean R) / (std R + 1e-6), or R - mean R."""
    totals = [sum(ep.rewards) for ep in episodes]
    mean = sum(totals) / len(totals)
    if normalize == "mean":
        return [r - mean for r in totals]
    std = (sum((r - mean) ** 2 for r in totals) / (len(totals) - 1)) ** 0.5
    return [(r - mean) / (std + 1e-6) for r in totals]


def credit_table(episodes: Sequence[CreditEpisode] | None = None) -> list[dict[str, object]]:
    """Rows (algo, action, route, outcome, step, move, advantage, credit): the shared action of
    a winner and a loser, and the decisive action of a winner and a loser of each route."""
    episodes = list(play_group() if episodes is None else episodes)

    def first(route: str, outcome: str) -> int:
        return next(
            i for i, ep in enumerate(episodes) if (ep.route, ep.outcome) == (route, outcome)
        )

    picks = [("shared", SHARED_STEP, "up", o) for o in ("win", "lose")]
    picks += [("decisive", DECISIVE_STEP, r, o) for r in ROUTES for o in ("win", "lose")]
    rows = []
    for algo in CREDIT_ALGOS:
        advantages, credits = estimator_credits(episodes, algo)
        for what, step, route, outcome in picks:
            i = first(route, outcome)
            rows.append(
                {
                    "algo": algo,
                    "action": what,
                    "route": route,
                    "outcome": outcome,
                    "step": step,
                    "move": episodes[i].actions[step],
                    "advantage": round(advantages[i][step], 3) + 0.0,  # no -0.000
                    "credit": round(credits[i][step], 3) + 0.0,
                }
            )
    return rows


def lost_group_table(episodes: Sequence[CreditEpisode] | None = None) -> list[dict[str, object]]:
    """Rows (variant, fatal, safe, abs_mean): the step credit of the fatal push (a fatal
    episode's t=5) and of the safe move (a safe episode's t=4) at the decision state, and the
    mean |step credit| over the group's rows, under each of :data:`LOST_GROUP_VARIANTS`."""
    episodes = list(play_lost_group() if episodes is None else episodes)
    fatal = next(i for i, ep in enumerate(episodes) if ep.route == "fatal")
    safe = next(i for i, ep in enumerate(episodes) if ep.route == "safe")
    rows = []
    for label, algo, settings in LOST_GROUP_VARIANTS:
        _, credits = estimator_credits(episodes, algo, **settings)
        flat = [abs(c) for episode in credits for c in episode]
        rows.append(
            {
                "variant": label,
                "fatal": round(credits[fatal][FATAL_STEP], 3) + 0.0,
                "safe": round(credits[safe][SAFE_STEP], 3) + 0.0,
                "abs_mean": round(sum(flat) / len(flat), 3) + 0.0,
            }
        )
    return rows


def format_lost_group(rows: Sequence[dict[str, object]]) -> str:
    """The all-lose section of ``credit.md``."""
    lines = [
        "## A group whose episodes all lose",
        "",
        "Four scripted episodes of the same room, all lost (10 moves, -0.1 each, R = -1.0 for "
        "all, so GRPO's advantage is 0). Two (*safe*) step `right, up, left, up` to route up's "
        "decision state at t=4, take the plan's first move `up` there, then bump into the wall "
        "once and run out of turns one push short. Two (*fatal*) bump into the wall first "
        "(`right, down`), reach the decision state at t=5 and push the box against the wall "
        "(`right`): the room is unsolvable from then on. Only the step penalty and the discount "
        "tell the returns apart: from the decision state the fatal pushers have one step fewer "
        "left to pay. *fatal push* and *safe move* are the step credit (beyond the outcome "
        "advantage) of the action each takes at the decision state; PTGPO's variants are its "
        "`advantage.root_spread` settings.",
        "",
        "| estimator | fatal push (t=5) | safe move (t=4) | mean abs step credit |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['fatal']:+.3f} | {row['safe']:+.3f} | "
            f"{row['abs_mean']:.3f} |"
        )
    by = {str(r["variant"]): r for r in rows}
    lines += [
        "",
        "What it shows. The paper's PTGPO divides the return differences by the root groups' "
        "spread, which here is the step penalty's timing alone, so the fatal push gets "
        f"{by['ptgpo (paper)']['fatal']:+.3f}: the action that lost the room is rewarded. "
        "GiGPO (no division) gives it "
        f"{by['gigpo']['fatal']:+.3f}. `outcome_gated` gives no tree credit in a root whose "
        "episodes share one outcome, so every step of this group gets "
        f"{by['ptgpo outcome_gated']['abs_mean']:.3f}; `floored` divides by at least the "
        f"box reward (1), leaving {by['ptgpo floored at 1']['fatal']:+.3f}.",
        "",
    ]
    return "\n".join(lines)


def format_credit(rows: Sequence[dict[str, object]]) -> str:
    """``credit.md``: the group, the table and what it shows."""
    lines = [
        "# Which action gets the credit",
        "",
        "`python -m agentenvs.benchmarks.learning.credit --out docs/learning-check/credit.md` "
        "writes this page (no training); `tests/benchmarks/test_credit.py` checks every "
        "advantage of every step against a hand computation.",
        "",
        f"One group of 8 scripted episodes of the training room `Sokoban-v0` `{ROOM}`, played "
        "through the environment with the training protocol's grid and the benchmark's turn "
        "limit (10), so the anchor observations and rewards are the environment's own (-0.1 a "
        "step; the solving push -0.1 + 1 + 10). All 8 step `right` from the start (t=0, the "
        "shared action). Then 4 go `up, left, up` and 4 go `right, up, left` (t=1-3: each "
        "route pushes the box once and ends in its own state). At t=4, in that state, the "
        "winners walk on and push the box home (solved at their 10th action); the losers push "
        "it where it can never reach the target (route up: `right`, against the wall; route "
        "right: `left`, into a corner) and play out the turn limit. Each route has 2 winners "
        "and 2 losers, so neither the shared action nor the route says anything about the "
        "outcome: only the action at t=4 does. The estimators run as the trainer runs them "
        "(`compute_advantages` on training rows) with each algorithm's default settings "
        "(GiGPO: gamma 0.95, omega 1, mean-normalised; PTGPO: gamma 0.95, tau_expand 2, "
        "unbounded depth, omega 1). *Step credit* is what an estimator gives the step beyond "
        "the episode's outcome advantage (GRPO's (R - mean) / std; GiGPO's R - mean).",
        "",
        "| estimator | action | route | episode | move | advantage | step credit |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['algo']} | {row['action']} (t={row['step']}) | {row['route']} | "
            f"{row['outcome']} | `{row['move']}` | {row['advantage']:+.3f} | "
            f"{row['credit']:+.3f} |"
        )
    lines += ["", _reading(rows), ""]
    return "\n".join(lines)


def _reading(rows: Sequence[dict[str, object]]) -> str:
    def credit(algo: str, action: str) -> float:
        return next(
            float(r["credit"])  # type: ignore[arg-type]
            for r in rows
            if r["algo"] == algo and r["action"] == action and r["outcome"] == "win"
        )

    return (
        "What it shows. GRPO gives every action of an episode the same advantage: the shared "
        "step and the decisive push get the same +-0.935, no separation. GiGPO's step credit "
        "is G_t minus the mean return of everyone who stood in that state, so the shared step, "
        f"taken by all 8 from the same state, gets {credit('gigpo', 'shared'):+.3f} in a "
        "winner and its negative in a loser: the later decision leaks back onto it, and the "
        f"decisive action gets only the discount more ({credit('gigpo', 'decisive'):+.3f}). "
        f"PTGPO gives the shared step {credit('ptgpo', 'shared'):+.3f} (everyone took it, so "
        "the child's mean return is the root's) and the route moves 0 (each route's mean is "
        "the group's), and puts the whole return difference on the decisive action: "
        f"{credit('ptgpo', 'decisive'):+.3f} = 2 sqrt(7/8) + 3 sqrt(3/4), one sqrt((n-1)/n) "
        "from each of the five anchor-state trees that reach it (the groups of 8 at t=0 and 1, "
        "of 4 at t=2, 3 and 4), in both routes although their decision states differ. Our "
        "PTGPO separates the two actions as the method says."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default=None, help="write the markdown here (else print it)")
    args = parser.parse_args(argv)
    text = format_credit(credit_table()) + "\n" + format_lost_group(lost_group_table())
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
