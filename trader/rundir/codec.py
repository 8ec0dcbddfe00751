"""The config codec: `config_to_dict` / `config_from_dict` turn a frozen dataclass config into a
JSON/TOML-able dict and back (nested dataclasses included); `toml_ready` and `json_ready` make such
a dict writable."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from trader.errors import ConfigError


def config_to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as a JSON/TOML-able dict: tuples become lists, nested
    dataclass configs become nested dicts."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise ConfigError(f"expected a dataclass config instance, got {type(config).__name__}")
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def config_from_dict(config_cls: type, values: Mapping[str, Any]) -> Any:
    """Build ``config_cls`` from a dict; unknown keys raise `ConfigError` naming them.

    Lists are turned back into tuples for tuple-typed fields, ints into floats for
    float fields and tables into nested dataclass configs (whose missing keys take
    their defaults), so a config survives a JSON or TOML round trip unchanged."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{config_cls.__name__} must be a table of keys, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown {config_cls.__name__} key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(config_cls)
    kwargs = {name: _coerce(hints.get(name), value) for name, value in values.items()}
    try:
        return config_cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{config_cls.__name__}: {err}") from err


def _coerce(hint: Any, value: Any) -> Any:
    """Undo JSON's flattening of tuples (-> lists), whole floats (-> ints) and nested configs (-> dicts)."""
    if hint is None:
        return value
    origin = typing.get_origin(hint)
    candidates = typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)
    for candidate in candidates:
        if dataclasses.is_dataclass(candidate) and isinstance(value, Mapping):
            return config_from_dict(candidate, value)
        if (candidate is tuple or typing.get_origin(candidate) is tuple) and isinstance(value, list):
            return tuple(value)
        if candidate is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
    return value


def replace_config(config: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that raises `ConfigError` for unknown keys."""
    return config_from_dict(type(config), {**config_to_dict(config), **changes})


def toml_ready(value: Any) -> Any:
    """A dict as TOML can hold it: None dropped (TOML has no null), non-finite floats as strings."""
    if isinstance(value, Mapping):
        return {str(k): toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [toml_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def json_ready(value: Any) -> Any:
    """A value as strict JSON can hold it: non-finite floats become None, tuples lists."""
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
