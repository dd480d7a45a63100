"""BabyAI-Text-v0: minigrid's BabyAI levels behind AgentBoard's text interface (as AgentGym
serves it, the interface Prefix-GRPO trains on)."""

from __future__ import annotations

import contextlib
import io
from typing import Any, ClassVar, Literal

import numpy as np

from agentenvs.babyai.fields import parse_fields
from agentenvs.babyai.levels import (
    LEVELS,
    SPLIT_SEEDS,
    Level,
    level_of,
    parse_task_id,
    split_task_indices,
)
from agentenvs.babyai.text import (
    View,
    available_actions_text,
    mission_to_goal,
    read_view,
    run_primitives,
)
from agentenvs.core import Outcome, ResetNeededError, TextEnv
from agentenvs.registration import check_dependencies

__all__ = ["NOT_RECOGNIZED", "NO_CHANGE", "RULES", "TASK_COMPLETED", "BabyAITextEnv", "Rules"]

NOT_RECOGNIZED = "The action is not recognized. Please check valid actions."
NO_CHANGE = "No change in state."
TASK_COMPLETED = "\n The task is completed."
LISTING = "You can take the following actions: "
# The original keeps a success only when its reward is above this (rules="agentgym" only).
PARITY_MIN_REWARD = 0.5

Rules = Literal["agentgym", "fixed"]
RULES: tuple[str, ...] = ("agentgym", "fixed")


def _make_minigrid(minigrid_id: str) -> Any:
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the BabyAI ids with Gymnasium)

    return gym.make(minigrid_id, disable_env_checker=True).unwrapped


class BabyAITextEnv(TextEnv):
    """Carry out a BabyAI instruction in a grid world through text actions.

    ## Description
    The real BabyAI levels of ``minigrid`` (3.x), each step described in words by AgentBoard's
    text wrapper as AgentGym serves it. Task ``agentgym/<n>`` is AgentGym's ``data_idx`` ``n``:
    level ``n % 40 + 1`` of AgentGym's 40-level table (:data:`agentenvs.babyai.LEVELS`) reset
    with seed ``n // 40``. High-level actions are expanded into minigrid's primitive actions by
    the original's breadth-first search over the cells in view. Splits: ``test`` is
    Prefix-GRPO's 90 tasks (its 18 levels, seeds 45-49), ``train`` the same levels with seeds
    0-44 (810 tasks), ``all`` the 40 levels with seeds 0-49 (2000 tasks).

    ## Action Space
    One of the actions listed in the observation (lower-cased and stripped first):
    ``turn left``, ``turn right``, ``move forward``, ``pickup <obj> <id>``, ``drop``,
    ``toggle``, ``go through <open door> <id>``, ``toggle and go through <door> <id>``,
    ``go to <obj> <id>``, ``check available actions`` (any text containing ``check`` lists the
    actions, as in the original). A listed action runs its primitives until one of them leaves
    the view unchanged. Any other text is invalid: the state is unchanged, the observation is
    the original's error text (``The action is not recognized. Please check valid actions.``,
    or a specific reason such as ``You cannot go to red ball 1, as there is no path leading to
    it.``), ``info["valid"]`` is False, and the turn is consumed.

    ## Observation Space
    ``Your goal: {mission}\\n{description}\\nAvailable actions: ["turn left", ...]`` at reset;
    after an action, ``{description}\\nAvailable actions: [...]`` (the error or listing text in
    place of the description for invalid and ``check`` actions). The mission reads ``then`` and
    ``after you`` as ``and``. The description lists each visible object with its id and offset
    (``There is a red ball 1 2 steps in front of you and 1 steps to your left.``), the nearest
    wall or box straight ahead and what is carried; ``\\n The task is completed.`` follows it
    when the mission is accomplished.

    ## Starting State
    minigrid's level generator with the task's seed; ``reset(seed=s)`` draws a training task.

    ## Rewards
    The reward of the action's last primitive: minigrid's ``1 - 0.9 * steps / max_steps``
    (counting primitive steps) when it completes the mission, else 0.

    ## Episode End
    With ``rules="agentgym"`` (the default) as in AgentGym's wrapper: a success counts (won,
    terminated) only when its reward is above 0.5, otherwise the episode goes on; every
    primitive of an action runs even after the mission ended; verifier failures do not end the
    episode. With ``rules="fixed"``: terminated when minigrid's verifier ends the mission
    (success, or failure in the strict Debug levels), the remaining primitives of that action
    are not run, and ``won`` is the verifier's success (also when a late success's reward is 0
    or below). Truncated after ``max_turns`` actions in both. minigrid's own ``max_steps``
    does not end the episode (as in the original), so a late success earns a reward of 0.1 or
    less, or even below 0.

    ## Information
    - ``task_id`` (str), ``family`` (str: ``GoTo``, ``Pickup``, ``AOD``, ``Find Room``, ``SLoc``
      for the study levels; ``Open``, ``PutNext``, ``Unlock``, ``Synth``, ``Boss`` otherwise),
      ``won`` (bool), ``valid`` (bool), ``turn`` (int),
    - ``admissible_actions`` (list[str]): the available actions, as listed in the observation,
    - ``fields`` (dict): ``goal``, ``objects``, ``facing``, ``carrying``, ``message``,
      ``completed``, ``available_actions`` (see :func:`agentenvs.babyai.fields.parse_fields`),
    - ``level`` (str): AgentGym's level id; ``minigrid_id`` (str): the minigrid 3.x id serving
      it (``BabyAI-GoToObjS4-v0`` for AgentGym's ``BabyAI-GoToObjS6-v0``, which minigrid 2.x
      registered with a 4x4 room).

    ## Arguments
    - ``max_turns`` (int): turn budget, default 20 (Prefix-GRPO's training setting; its
      evaluation uses 30).
    - ``rules`` (str): ``"agentgym"`` (default) reproduces AgentGym's wrapper, quirks that
      change outcomes included (see Episode End; and the no-path message of ``toggle and go
      through`` prints the door-count dict); ``"fixed"`` corrects them. Recorded in
      :attr:`variant`.
    - ``render_mode`` (str | None): ``"ansi"`` returns the observation.

    ## Version History
    - v0: initial version.
    """

    env_id: ClassVar[str] = "BabyAI-Text-v0"
    splits: ClassVar[tuple[str, ...]] = tuple(SPLIT_SEEDS)
    default_max_turns: ClassVar[int] = 20
    task_id_forms: ClassVar[tuple[str, ...]] = (
        "agentgym/<n> for n >= 0 (level n % 40 + 1, seed n // 40)",
    )

    def __init__(
        self,
        max_turns: int | None = None,
        render_mode: str | None = None,
        rules: Rules = "agentgym",
    ) -> None:
        check_dependencies(self.env_id)  # minigrid, at gym.make, naming the extra to install
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.rules: Rules = _check_rules(rules)
        self.parity = self.rules == "agentgym"
        self._minigrid_envs: dict[str, Any] = {}
        self._mg: Any = None
        self._level: Level | None = None
        self._image: np.ndarray | None = None
        self._view: View | None = None
        self._actions_text = ""  # the view's "Available actions: [...]" line
        # the latest observation and its fields, built from the view (no parsing)
        self._known_fields: tuple[str, dict[str, Any]] | None = None

    # ----- tasks -------------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        if split not in SPLIT_SEEDS:
            raise self._unknown_split(split)
        return [f"agentgym/{i}" for i in split_task_indices(split)]

    def family(self, task_id: str) -> str:
        if task_id == self._task_id and self._level is not None:  # checked when it started
            return self._level.family
        return self._level_of(task_id)[0].family

    def level(self, task_id: str) -> str:
        """AgentGym's level id of ``task_id`` (e.g. ``BabyAI-GoToRedBallGrey-v0``)."""
        return self._level_of(task_id)[0].name

    # ----- what the expert and tools may read --------------------------------------------------

    @property
    def minigrid(self) -> Any:
        """The live (unwrapped) minigrid environment; read it, copy it, do not step it."""
        if self._mg is None:
            raise ResetNeededError("call reset() before reading the minigrid state")
        return self._mg

    @property
    def view(self) -> View:
        """The current :class:`~agentenvs.babyai.text.View` (actions and their targets)."""
        if self._view is None:
            raise ResetNeededError("call reset() before reading the view")
        return self._view

    @property
    def image(self) -> np.ndarray:
        """The image of the latest minigrid observation (what the next action is checked
        against)."""
        if self._image is None:
            raise ResetNeededError("call reset() before reading the image")
        return self._image

    def expand(self, action: str) -> list[int] | None:
        """The primitive actions ``action`` would run now, or None if it is not available."""
        return self.view.expand(action.lower().strip())

    # ----- the contract ------------------------------------------------------------------------

    def _start_task(self, task_id: str) -> str:
        level, seed = self._level_of(task_id)
        mg = self._minigrid_envs.get(level.minigrid_id)
        if mg is None:
            mg = self._minigrid_envs[level.minigrid_id] = _make_minigrid(level.minigrid_id)
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints rejected samples
            obs, _ = mg.reset(seed=seed)
        self._mg, self._level = mg, level
        self._refresh(obs["image"])
        goal = mission_to_goal(mg.mission)
        text = f"Your goal: {goal}\n{self._view.description}\n{self._actions_line()}"
        return self._known(text, self._view.fields(goal=goal))

    def _apply(self, action: str) -> Outcome:
        text = action.lower().strip()
        view = self._view
        assert view is not None
        if "check" in text:
            return Outcome(self._feedback(f"{LISTING}{', '.join(view.actions)}"))
        if text == "":
            return Outcome(self._feedback(NO_CHANGE), valid=False)
        primitives = view.expand(text)
        if primitives is None:
            return Outcome(self._feedback(view.errors.get(text, NOT_RECOGNIZED)), valid=False)
        if not primitives:
            return Outcome(self._feedback(NO_CHANGE))
        done = run_primitives(
            self._mg, primitives, self._image, stop_when_terminated=not self.parity
        )
        self._refresh(done.observation["image"])
        if self.parity:
            completed = done.terminated
            won = terminated = done.terminated and done.reward > PARITY_MIN_REWARD
        else:
            # the verifier's verdict, not the reward's sign: a late success's reward
            # 1 - 0.9 * steps / max_steps can be exactly 0 (or below)
            won = completed = done.status == "success"
            terminated = done.terminated
        text_out = self._view.description + (TASK_COMPLETED if completed else "")
        observation = self._known(
            f"{text_out}\n{self._actions_line()}", self._view.fields(completed=completed)
        )
        return Outcome(
            observation,
            reward=done.reward,
            won=won,
            terminated=terminated,
        )

    def _get_state(self) -> Any:
        assert self._level is not None
        return (self._level.number, self._mg)

    def _set_state(self, task_id: str, state: Any) -> None:
        number, mg = state
        level = LEVELS[number - 1]
        self._minigrid_envs[level.minigrid_id] = mg
        self._mg, self._level = mg, level
        self._refresh(mg.gen_obs()["image"])
        self._known_fields = None

    def _admissible_actions(self) -> list[str] | None:
        return list(self._view.actions) if self._view is not None else None

    def fields(self, observation: str) -> dict[str, Any]:
        known = self._known_fields
        if known is not None and observation is known[0]:
            fields = dict(known[1])
            fields["objects"] = [list(o) for o in fields["objects"]]
            fields["available_actions"] = list(fields["available_actions"])
            return fields
        return parse_fields(observation)

    @property
    def variant(self) -> dict[str, Any]:
        return {"rules": self.rules}

    def _extra_info(self) -> dict[str, Any]:
        if self._level is None:
            return {}
        return {"level": self._level.name, "minigrid_id": self._level.minigrid_id}

    # ----- helpers -----------------------------------------------------------------------------

    def _level_of(self, task_id: str) -> tuple[Level, int]:
        index = parse_task_id(task_id) if isinstance(task_id, str) else None
        if index is None:
            raise self._unknown_task(task_id)
        return level_of(index)

    def _refresh(self, image: np.ndarray) -> None:
        self._image = image
        self._view = read_view(self._mg, image, parity=self.parity)
        self._actions_text = available_actions_text(list(self._view.actions))

    def _known(self, observation: str, fields: dict[str, Any]) -> str:
        """Remember ``observation``'s fields (built from the view) and return it."""
        self._known_fields = (observation, fields)
        return observation

    def _feedback(self, message: str) -> str:
        """A feedback observation: ``message`` and the (unchanged) action list."""
        assert self._view is not None
        return self._known(f"{message}\n{self._actions_line()}", self._view.fields(message=message))

    def _actions_line(self) -> str:
        assert self._view is not None
        return self._actions_text


def _check_rules(rules: str) -> Rules:
    if rules not in RULES:
        raise ValueError(f"rules must be one of {list(RULES)}, got {rules!r}")
    return rules  # type: ignore[return-value]
