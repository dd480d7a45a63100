"""Typed configuration: dataclasses filled from a YAML or TOML file plus ``key=value`` overrides.

Every trainer's settings are a dataclass with a docstring per field (the defaults are the
papers'). :func:`load_config` reads an optional file, applies command-line overrides such as
``lr=5e-6`` or ``rollout.temperature=0.7`` (dotted keys reach nested dataclasses), converts each
value to the field's type, and names the valid keys (with a "did you mean") for an unknown one.
:func:`config_to_dict` gives the plain form that trainers save beside their checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agentenvs.suggestions import did_you_mean

__all__ = ["ConfigError", "config_to_dict", "load_config", "parse_overrides"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override that does not fit the config dataclass."""


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
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from exc


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
