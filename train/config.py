"""Typed configuration: dataclasses filled from a YAML or TOML file plus ``key=value`` overrides.

Every trainer's settings are a dataclass with a docstring per field (the defaults are the
papers'). :func:`load_config` reads an optional file, applies command-line overrides such as
``lr=5e-6`` or ``rollout.temperature=0.7`` (dotted keys reach nested dataclasses), converts each
value to the field's type, and names the valid keys (with a "did you mean") for an unknown one.
A dataclass checks its values in ``__post_init__`` (:func:`check_ranges` for the numeric ones), so
a bad setting is a :class:`ConfigError` before any model loads; on the command line that is one
line with its fix (:mod:`agentenvs.cli_errors`). :func:`config_to_dict` gives the plain form that
trainers save beside their checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentenvs.cli_errors import CommandError
from agentenvs.suggestions import did_you_mean

__all__ = [
    "RANGES",
    "ConfigError",
    "check_device",
    "check_ranges",
    "config_to_dict",
    "load_config",
    "parse_overrides",
]

T = TypeVar("T")


class ConfigError(CommandError):
    """A configuration file, override or value that does not fit the config dataclass (or the
    data it names); the message says what and how to fix it."""


# rule -> the test of a value; None (an optional setting left unset) passes every rule
RANGES: dict[str, Callable[[float], bool]] = {
    "> 0": lambda v: v > 0,
    ">= 0": lambda v: v >= 0,
    ">= 1": lambda v: v >= 1,
    ">= 2": lambda v: v >= 2,
    "> 1": lambda v: v > 1,
    "in [0, 1)": lambda v: 0 <= v < 1,
    "in (0, 1]": lambda v: 0 < v <= 1,
}


def check_ranges(settings: Any, rules: Mapping[str, str], prefix: str = "") -> None:
    """Raise ValueError for the first field of the dataclass ``settings`` whose value breaks its
    rule (a key of :data:`RANGES`), naming the setting, the rule and the field's default."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    for name, rule in rules.items():
        value = getattr(settings, name)
        if value is None or RANGES[rule](value):
            continue
        default = defaults.get(name, dataclasses.MISSING)
        fix = "" if default in (dataclasses.MISSING, None) else f" (default {default!r})"
        raise ValueError(
            f"{prefix}{name} must be {rule}, got {value!r}: give {prefix}{name} a value {rule}{fix}"
        )


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
    elif path.suffix == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        data = tomllib.loads(text)
    elif path.suffix == ".json":
        data = json.loads(text)
    else:
        raise ConfigError(f"config file {path}: use .yaml, .yml, .toml or .json")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """``["lr=1e-5", "rollout.k=4"]`` -> a nested dict of strings (typed later)."""
    nested: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not key=value")
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} goes below a value that is not a section")
        node[parts[-1]] = value
    return nested


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except (ConfigError, ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: {value!r} fits none of {hint}: {errors}")
    if origin is typing.Literal:
        for arg in args:
            if value == arg or str(value) == str(arg):
                return arg
        raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a section, got {value!r}")
        return _build(hint, value, where + ".")
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()] if value else []
        item = args[0] if args else Any
        items = [_coerce(v, item, where) for v in value]
        return tuple(items) if origin is tuple or hint is tuple else items
    if origin is dict or hint is dict:
        if isinstance(value, str):
            value = json.loads(value)
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: {value!r} is not a boolean")
    if hint in (int, float, str):
        if hint is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}: {value!r} is not an integer")
        try:
            return (
                hint(float(value))
                if hint is int and isinstance(value, str) and ("e" in value.lower() or "." in value)
                else hint(value)
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {value!r} is not a {hint.__name__}") from exc
    return value


def _build(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = unknown[0]
        hint = did_you_mean(key, names, prefix)
        raise ConfigError(f"unknown setting {prefix}{key!r}; valid settings: {names}.{hint}")
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc


def check_device(device: str) -> None:
    """Raise ValueError unless ``device`` is ``auto``, ``cpu``, ``mps``, or ``cuda`` / ``cuda:N``
    on a machine that has CUDA (imports torch only for the last)."""
    if device in ("auto", "cpu", "mps"):
        return
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, not {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            f"device={device}, but torch sees no CUDA device here: use device=auto "
            "(CUDA when there is one) or device=cpu"
        )


def config_to_dict(config: Any) -> dict[str, Any]:
    """The plain-data form of a config dataclass (JSON-serialisable)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Build ``cls`` from its defaults, then the file at ``path``, then ``overrides``."""
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_file(Path(path))
    data = _merge(data, parse_overrides(overrides))
    return _build(cls, data)
