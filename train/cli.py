"""What the train commands (``agentenvs train sft``, ``agentenvs train rl``) share on the command
line: the extra they need, and their settings from defaults, ``--config FILE``, the flags and
the ``key=value`` overrides, with the model argument resolved.

Every problem found here is a :class:`~agentenvs.train.config.ConfigError` (a bad value, an
unknown key, a missing file, a model that is not there): the dispatcher prints it as one line
``agentenvs train sft: <what> ...`` with its fix and exits 2 (:mod:`agentenvs.cli_errors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from agentenvs.cli_errors import require_extra
from agentenvs.train.config import ConfigError, load_config

__all__ = ["command_config", "require_training_extra"]

T = TypeVar("T")


def require_training_extra() -> None:
    """The train commands run on torch and transformers (the ``llm`` extra); checked before
    either is imported."""
    require_extra("llm", "torch", "transformers")


def command_config(
    cls: type[T],
    config_file: str | None,
    overrides: Sequence[str],
    flags: Mapping[str, str | None],
    *,
    resume: bool,
) -> T:
    """``cls`` built from ``config_file`` and ``overrides``, then the flags given (``{key:
    value}``, None or empty: not given); its ``model`` resolved (:func:`resolve_model`; a
    ``--model`` flag first of all) unless resuming without one, where the checkpoint's model is
    read."""
    flags = {key: value for key, value in flags.items() if value}
    if "model" in flags:
        flags["model"] = _resolve(flags["model"])
    config = load_config(cls, config_file, [*overrides, *(f"{k}={v}" for k, v in flags.items())])
    if "model" not in flags and (config.model or not resume):  # type: ignore[attr-defined]
        config.model = _resolve(config.model)  # type: ignore[attr-defined]
    return config


def _resolve(model: str) -> str:
    from agentenvs.agents.models import ModelNotFoundError, resolve_model

    try:
        return resolve_model(model, what="--model")
    except ModelNotFoundError as exc:
        raise ConfigError(str(exc)) from None
