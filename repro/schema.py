"""Strict conversion of plain data (parsed TOML) into the typed configs of ``algorithms``.

The target classes are frozen dataclasses owned by ``algorithms`` (``EnvConfig``, ``SamplerConfig``,
``RunnerConfig``, each algorithm's ``Config``). Their fields and types are read by introspection,
so a field added there is picked up here without a change. Anything that does not fit is a
``ConfigError`` whose message is one line naming the file and the key: an unknown key, a missing
required key, a value of the wrong type, or a value the class's own ``__post_init__`` rejects.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ConfigError(Exception):
    """A bad setting, profile, plan or command-line value. ``str(err)`` is one line; the CLI exits 2."""


def field_types(cls: type) -> dict[str, Any]:
    """Resolved type hints of the init fields of dataclass ``cls`` (string annotations evaluated)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def required_fields(cls: type) -> list[str]:
    """Init fields of ``cls`` without a default."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def field_defaults(cls: type) -> dict[str, Any]:
    """The default of every init field of ``cls`` that has one."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def unknown_key_message(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"known: {', '.join(known)}"


def type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def convert(value: Any, hint: Any, where: str) -> Any:
    """``value`` checked against type ``hint`` and converted where TOML has no exact form.

    Conversions: an int where a float is expected, a list where a tuple is expected, a table where
    a dataclass is expected. A bool is never accepted as a number, a float must be finite (TOML
    has ``inf`` and ``nan``), an integer must fit in 64 bits. ``where`` names the key for the
    error message.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin is typing.Literal:
        if value not in args or type(value) is not type(next(a for a in args if a == value)):
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {type_name(hint)}, got {type(value).__name__} {value!r}")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list for {type_name(hint)}, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} items for {type_name(hint)}, got {len(value)}")
        return tuple(convert(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        return [convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table for {hint.__name__}, got {type(value).__name__}")
        return build(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {type(value).__name__} {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        if not INT64_MIN <= value <= INT64_MAX:
            raise ConfigError(f"{where}: {value} does not fit in 64 bits (counters and arrays hold int64)")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{where}: field type {type_name(hint)} cannot be given in a config file")


def check_keys(cls: type, values: Mapping[str, Any], where: str) -> None:
    """Unknown keys of ``values`` for dataclass ``cls`` are an error naming the first one."""
    known = list(field_types(cls))
    for key in values:
        if key not in known:
            raise ConfigError(
                f"{where}: unknown key '{key}' for {cls.__module__}.{cls.__qualname__}; "
                + unknown_key_message(key, known)
            )


def build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """Instance of dataclass ``cls`` from ``values``, strictly: see the module docstring.

    ``where`` prefixes every message, e.g. ``"repro/configs/settings/x.toml [algo]"``.
    """
    check_keys(cls, values, where)
    for name in required_fields(cls):
        if name not in values:
            raise ConfigError(f"{where}: missing required key '{name}' for {cls.__qualname__}")
    hints = field_types(cls)
    kwargs = {key: convert(value, hints[key], f"{where} '{key}'") for key, value in values.items()}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:
        # The class validated its own fields (Contract 4: __post_init__ raises naming the field).
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{where}: {message}") from e
