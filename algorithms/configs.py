"""Typed configs from plain data, strictly, and the one-line checks every config class uses.

The target classes are frozen dataclasses (``EnvConfig``, ``SamplerConfig``, ``RunnerConfig``, each
algorithm's ``Config``). Their fields and types are read by introspection, so a field added there
is picked up here without a change. ``build`` is the one converter from plain data (parsed TOML,
a run's ``config.json``) to a config: anything that does not fit is a ``ConfigError`` whose message
is one line naming the file and the key: an unknown or renamed key, a missing required key, a value
of the wrong type, or a value the class's own ``__post_init__`` rejects (``check_field``), or a
replay algorithm's batch, replay size and learning start that do not fit together (``check_replay_sizes``).

Names: one per idea, listed in docs/ARCHITECTURE.md (Glossary). ``RENAMED`` maps the names earlier
versions used to the current ones: a settings file that still says an old name gets a one-line
error naming the new one; a run directory's ``config.json`` written before the rename is read
through ``migrate_renamed``.
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
# The EnvConfig ids of MinAtar games start with this; here, torch-free, so that analysis reads it too.
MINATAR_PREFIX = "minatar_"


class ConfigError(ValueError):
    """A bad setting, profile, plan, command-line or ``config.json`` value. ``str(err)`` is one line;
    the CLI exits 2."""


# Old key -> current key (docs/ARCHITECTURE.md, Glossary). The old names came from the sources each
# algorithm was first written after: rlpyt (min_steps_learn), SB3 / Baselines (max_grad_norm), the
# optimizers' own argument names, and two names of one update frequency (DQN's env steps per
# update, the Q-value policy gradients' updates per env step).
RENAMED: dict[str, str] = {
    "min_steps_learn": "learning_starts_steps",
    "max_grad_norm": "clip_grad_norm",
    "adam_eps": "optimizer_eps",
    "adam_epsilon": "optimizer_eps",
    "rmsprop_epsilon": "optimizer_eps",
    "train_every_steps": "env_steps_per_update",
    "updates_per_step": "env_steps_per_update",
}
# Old keys whose value is the reciprocal of the new key's.
RECIPROCAL = frozenset({"updates_per_step"})
# The largest run seed: numpy's global RNG (``seed_everything``) takes seeds below 2**32. Here, not in
# train.py, so that planning and analysis check seeds without loading the training core.
MAX_SEED = 2**32 - 1


def migrate_renamed(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with every old key (``RENAMED``) that names a field of ``cls`` under its new name
    (its value inverted for a ``RECIPROCAL`` key): how a ``config.json`` written before a rename is
    read."""
    known = set(field_types(cls))
    migrated = {}
    for key, value in values.items():
        new = RENAMED.get(key)
        if new in known:
            migrated[new] = 1 / value if key in RECIPROCAL else value
        else:
            migrated[key] = value
    return migrated


def check_field(config: Any, condition: bool, field: str, what: str) -> None:
    """``ValueError`` naming ``<module>.<Class>.<field>`` and its value unless ``condition``: the
    one-line value checks of every config's ``__post_init__``."""
    if not condition:
        cls = type(config)
        raise ValueError(f"{config_label(cls)}.{field} must be {what}, got {getattr(config, field)!r}")


def check_ranges(
    config: Any,
    *,
    unit: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
    positive_ints: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
    sizes: tuple[str, ...] = (),
) -> None:
    """The range checks most config fields need, by kind (``check_field`` errors): ``unit`` in
    [0, 1], ``positive`` > 0, ``positive_ints`` integers >= 1, ``non_negative`` >= 0, ``sizes``
    tuples of positive integers (layer widths)."""
    for name in unit:
        check_field(config, 0.0 <= getattr(config, name) <= 1.0, name, "in [0, 1]")
    for name in positive:
        check_field(config, getattr(config, name) > 0, name, "> 0")
    for name in positive_ints:
        value = getattr(config, name)
        check_field(
            config, isinstance(value, int) and not isinstance(value, bool) and value >= 1, name, "an int >= 1"
        )
    for name in non_negative:
        check_field(config, getattr(config, name) >= 0, name, ">= 0")
    for name in sizes:
        value = getattr(config, name)
        ok = isinstance(value, tuple) and all(isinstance(h, int) and h >= 1 for h in value)
        check_field(config, ok, name, "a tuple of positive ints")


def config_label(cls: type) -> str:
    """``dqn.Config`` for an algorithm's ``Config`` (they share the class name), else the class name."""
    if cls.__qualname__ == "Config":
        return f"{cls.__module__.rsplit('.', 1)[-1]}.Config"
    return cls.__qualname__


def check_types(config: Any) -> None:
    """``TypeError`` naming the first field of ``config`` whose value does not match its scalar
    annotation (int, float, str, bool): a config built in Python gets the checks ``convert`` gives
    one built from a file. An int passes where a float is expected, a bool never where a number is,
    and a float must be finite (inf or nan would pass every range check and fail inside the job)."""
    for name, expected in field_types(type(config)).items():
        value = getattr(config, name)
        if expected is bool:
            ok = isinstance(value, bool)
        elif expected is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif expected is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        elif expected is str:
            ok = isinstance(value, str)
        else:
            continue
        if not ok:
            raise TypeError(
                f"{config_label(type(config))}.{name} must be {'a finite ' if expected is float else ''}"
                f"{expected.__name__}, got {type(value).__name__} {value!r}"
            )


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
        if key in RENAMED and RENAMED[key] in known:
            reciprocal = f" (its reciprocal: 1 / {key})" if key in RECIPROCAL else ""
            raise ConfigError(f"{where}: key '{key}' was renamed to '{RENAMED[key]}'{reciprocal}")
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
        config = cls(**kwargs)
        check_replay_sizes(config)
    except (ValueError, TypeError) as e:
        # The class validated its own fields (Contract 4: __post_init__ raises naming the field).
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{where}: {message}") from e
    return config


def check_replay_sizes(config: Any) -> None:
    """A replay algorithm's Config (one with ``replay_size_steps``; Glossary names) as loaded: its
    replay must hold one batch (``batch_size`` transitions, or ``batch_size_sequences`` sequences of
    one per ``sequence_period_steps`` env steps) and the env steps training waits for
    (``learning_starts_steps``). A smaller replay makes every batch repeat items (uniform draws
    with replacement), and DDPG, TD3 and SAC, which wait for that many stored transitions
    (``learners.qpg.ReplayFeed``), would never train. Checked when a config is loaded (``build``:
    settings, profiles, plans, ``repro show``), not in ``__post_init__``, so that tests may still
    build tiny replays by hand."""
    size = getattr(config, "replay_size_steps", None)
    if not isinstance(size, int):
        return
    # Named after replay_size_steps, so that the error blames the file that set the replay's size.
    if hasattr(config, "batch_size_sequences"):
        per_item = max(1, getattr(config, "sequence_period_steps", 1))
        batch = f"batch_size_sequences={config.batch_size_sequences:,} sequences, one per {per_item} steps"
        fits = size // per_item >= config.batch_size_sequences
    else:
        batch, fits = f"batch_size={config.batch_size:,} transitions", size >= config.batch_size
    check_field(config, fits, "replay_size_steps", f"large enough for one batch ({batch})")
    starts = getattr(config, "learning_starts_steps", 0)
    check_field(config, size >= starts, "replay_size_steps", f">= learning_starts_steps={starts:,}")
