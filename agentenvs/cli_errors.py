"""How an ``agentenvs`` command fails on what its user can fix: one line on stderr, no traceback.

* :class:`CommandError`: a setting the command cannot run with; the message says what is wrong
  and how to fix it. Exit code 2.
* A missing extra: :func:`require_extra` checks the modules of the extra a command needs before
  it starts work, and an ``ImportError`` of an extra's module anywhere in a command is reported
  the same way (:func:`missing_extra`): ``needs torch and transformers: pip install
  'agentenvs[llm]'``. Exit code 1.

:func:`run_command` applies both to every subcommand: the console script's dispatcher
(:mod:`agentenvs.cli`) runs each command through it, so a command raises these errors and never
prints them itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence

__all__ = [
    "EXTRAS",
    "CommandError",
    "MissingExtraError",
    "missing_extra",
    "require_extra",
    "run_command",
]

# extra -> the top-level modules of its requirements that agentenvs imports (pyproject.toml's
# optional dependencies; tests/packaging holds the two in step). A module several extras share
# is reported under the first extra listing it.
EXTRAS: dict[str, tuple[str, ...]] = {
    "llm": ("torch", "transformers", "safetensors", "tokenizers", "gguf", "accelerate"),
    "babyai": ("minigrid",),
    "webshop": ("regex", "jinja2"),
    "alfworld": ("alfworld", "textworld"),
    "train": ("tensorboard", "yaml", "matplotlib"),
    "serve": ("fastapi", "uvicorn", "httpx", "openenv"),
    "ray": ("ray",),
    "vllm": ("vllm",),
    "wandb": ("wandb",),
    "trl": ("trl", "datasets", "jmespath"),
    "verl": ("verl", "tensordict", "orjson", "cachetools"),
    "openai": ("openai",),
    "mcp": ("mcp",),
}

USAGE_EXIT = 2
MISSING_EXTRA_EXIT = 1


class CommandError(ValueError):
    """A setting a command cannot run with; the message says what and its fix (exit code 2)."""


class MissingExtraError(ImportError):
    """A command needs modules of an extra that is not installed (exit code 1)."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _extra_of(module: str) -> str | None:
    return next((extra for extra, mods in EXTRAS.items() if module in mods), None)


def _needs(extra: str, missing: Sequence[str]) -> str:
    names = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
    return f"needs {names}: pip install 'agentenvs[{extra}]'"


def require_extra(extra: str, *modules: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when any of ``modules`` (default: all
    of the extra's, :data:`EXTRAS`) is not installed; imports nothing."""
    wanted = modules or EXTRAS[extra]
    missing = [m for m in wanted if not _installed(m)]
    if missing:
        raise MissingExtraError(_needs(extra, missing), name=missing[0])


def missing_extra(exc: ImportError) -> str | None:
    """The one-line message for ``exc`` when it is a missing extra (the extra's missing modules
    and the install command), else None (an ImportError of something else: a real bug)."""
    text = str(exc)
    if isinstance(exc, MissingExtraError) or "pip install 'agentenvs[" in text:
        return text if "\n" not in text else None
    top = (exc.name or "").partition(".")[0]
    extra = _extra_of(top)
    if extra is None or _installed(top):  # installed but broken: not a missing extra
        return None
    return _needs(extra, [m for m in EXTRAS[extra] if not _installed(m)])


def run_command(prog: str, target: str, argv: Sequence[str]) -> int:
    """Import ``target`` (``module:function``), call it with ``argv`` and return its exit code;
    a :class:`CommandError` or a missing extra is one line ``prog: message`` on stderr."""
    try:
        module, _, function = target.partition(":")
        entry = getattr(importlib.import_module(module), function)
        return int(entry(list(argv)) or 0)
    except CommandError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return USAGE_EXIT
    except ImportError as exc:
        message = missing_extra(exc)
        if message is None:
            raise
        print(f"{prog}: {message}", file=sys.stderr)
        return MISSING_EXTRA_EXIT
