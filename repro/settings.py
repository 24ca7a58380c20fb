"""Published settings: TOML data files, every value with its source, loaded strictly.

File format (``repro/configs/settings/<name>.toml``; the scheme is documented in
``repro/configs/README.md``)::

    [setting]
    title = "R2D2 as published"
    citation = "Kapturowski et al. 2019, ICLR (camera-ready)"
    algo = "r2d1"                 # registry name or dotted module path; inherited from the base if omitted
    base = "r2d2_paper"           # optional, one level: the base may not have a base itself

    [algo]                        # -> the algorithm's Config      [env] -> EnvConfig
    discount = { value = 0.997, source = "Sec. 2.3; Table 2" }   # [sampler], [runner] -> run_config.py
    clip_grad_norm = { value = 80.0, source = "rlpyt r2d1.py", origin = "unverified" }

Every key is a table ``{ value, source[, origin] }``; ``origin`` says what kind of source it is
(``ORIGINS``; default ``published``). A setting inherits its base's entries and overrides some;
keys it does not give at all take the dataclass default and are shown with origin ``default``.
A setting is loaded by name (the shipped directory) or by path (any ``.toml`` file, whose base is
looked up next to it first).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.configs import (
    ConfigError,
    build,
    check_keys,
    convert,
    field_defaults,
    field_types,
    unknown_key_message,
)
from protocol.files import SETTINGS_DIR, read_toml

# The origin of a value given with ``--set`` (repro/cli.py); recorded in the run's config.json.
COMMAND_LINE = "command line"

ORIGINS: dict[str, str] = {
    "published": "stated in the cited source",
    "inherited": "not in the paper; taken from the work it defers to (R2D2 Table 2 caption: Ape-X)",
    "code": "not fixed by the paper; from the reference implementation named in the source",
    "unverified": "attributed to the authors, but not found in the paper",
    "derived": "computed from published values (the source says how)",
    "harness": "a choice of this harness (how to run), not a published hyperparameter",
    "default": "not given by the setting: the dataclass default",
    "profile": "changed by a profile (budget only)",
    "plan": "set per job by an experiment plan (game, seed)",
    COMMAND_LINE: "set on the command line (python -m repro run/show --set section.key=value)",
}
FILE_ORIGINS = ("published", "inherited", "code", "unverified", "derived", "harness")
SECTIONS = ("algo", "env", "sampler", "runner")
# ``deviations``: named groups of keys, each one deviation of this setting from another (an ablation
# plan's ``ablate``, repro/plans.py): ``[[setting.deviations]] name = "..." keys = ["section.key"]``.
# ``defaults_of``: this file's [algo] values are that algorithm's ``Config()`` defaults, one test per
# algorithm checks they are equal (tests/test_config_defaults.py): the published file is the source.
META_KEYS = {
    "title": str,
    "citation": str,
    "algo": str,
    "base": str,
    "description": str,
    "deviations": list,
    "defaults_of": str,
}
ENTRY_KEYS = ("value", "source", "origin")


@dataclass(frozen=True)
class Entry:
    """One hyperparameter value with where it comes from. ``file`` is the file that set it."""

    value: Any
    source: str
    origin: str
    file: str


@dataclass(frozen=True)
class Setting:
    """A resolved setting: metadata plus one ``Entry`` per ``section.key`` (type-checked)."""

    name: str
    path: Path
    title: str
    citation: str
    algo: str
    base: str | None
    description: str
    entries: dict[str, Entry]
    deviations: Sequence[Any] = ()  # as the file declares them

    def section(self, section: str) -> dict[str, Any]:
        prefix = section + "."
        return {k[len(prefix) :]: e.value for k, e in self.entries.items() if k.startswith(prefix)}


def default_schema(algo: str) -> dict[str, type]:
    """Section -> dataclass for algorithm ``algo``: its Config, EnvConfig, SamplerConfig, RunnerConfig."""
    from algorithms import registry, run_config

    try:
        algo_cls = registry.config_class(algo)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    except ImportError as e:
        raise ConfigError(f"algorithm {algo!r}: its module does not import: {e}") from e
    return {
        "algo": algo_cls,
        "env": run_config.env_config_class(),
        "sampler": run_config.SamplerConfig,
        "runner": run_config.RunnerConfig,
    }


Schema = Callable[[str], dict[str, type]]


def available_settings(settings_dir: Path = SETTINGS_DIR) -> list[str]:
    return sorted(p.stem for p in Path(settings_dir).glob("*.toml"))


def _find(name_or_path: str, settings_dir: Path, near: Path | None = None) -> Path:
    """A setting file by name (``near`` first, then ``settings_dir``) or by path (relative to ``near``,
    the referring setting's folder, when given; else to the working directory)."""
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
        if near is not None and not path.is_absolute():
            path = near / path
        if not path.is_file():
            raise ConfigError(f"setting file {path} does not exist")
        return path
    for directory in ([near] if near else []) + [Path(settings_dir)]:
        candidate = directory / f"{name_or_path}.toml"
        if candidate.is_file():
            return candidate
    known = available_settings(settings_dir)
    raise ConfigError(f"unknown setting '{name_or_path}'; " + unknown_key_message(name_or_path, known))


def parse_entry(raw: Any, where: str, origins: tuple[str, ...] = FILE_ORIGINS) -> tuple[Any, str, str]:
    """``(value, source, origin)`` of one ``{ value, source[, origin] }`` table."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f'{where}: must be a table {{ value = ..., source = "..." }}, got a bare {type(raw).__name__}'
        )
    for key in raw:
        if key not in ENTRY_KEYS:
            raise ConfigError(
                f"{where}: unknown field '{key}' (an entry has value, source and optionally origin)"
            )
    if "value" not in raw:
        raise ConfigError(f"{where}: missing 'value'")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}: missing 'source' (every value says where it comes from)")
    origin = raw.get("origin", "published")
    if origin not in origins:
        raise ConfigError(f"{where}: origin {origin!r} is not one of {list(origins)}")
    return raw["value"], source, origin


def _read_file(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Meta table and raw section tables of one setting file, structure checked."""
    data = read_toml(path)
    for key in data:
        if key != "setting" and key not in SECTIONS:
            raise ConfigError(
                f"{path}: unknown table [{key}]; "
                f"expected [setting] and {', '.join(f'[{s}]' for s in SECTIONS)}"
            )
    meta = data.get("setting")
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{path}: missing [setting] table (title, citation, algo or base)")
    for key, value in meta.items():
        if key not in META_KEYS:
            raise ConfigError(
                f"{path} [setting]: unknown key '{key}'; " + unknown_key_message(key, list(META_KEYS))
            )
        if not isinstance(value, META_KEYS[key]):
            expected = "a list of tables" if META_KEYS[key] is list else "a string"
            raise ConfigError(f"{path} [setting] '{key}': expected {expected}, got {type(value).__name__}")
    for key in ("title", "citation"):
        if key not in meta:
            raise ConfigError(f"{path} [setting]: missing required key '{key}'")
    if "algo" not in meta and "base" not in meta:
        raise ConfigError(f"{path} [setting]: missing required key 'algo' (or a 'base' to inherit it from)")
    sections = {}
    for section in SECTIONS:
        table = data.get(section, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"{path}: [{section}] must be a table")
        sections[section] = dict(table)
    return dict(meta), sections


def load_setting(
    name_or_path: str, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema
) -> Setting:
    """Load, inherit and type-check one setting; any problem is a ``ConfigError`` naming file and key."""
    path = _find(name_or_path, settings_dir)
    meta, sections = _read_file(path)
    layers = [(path, sections)]
    base_name = meta.get("base")
    if base_name is not None:
        try:
            base_path = _find(base_name, settings_dir, near=path.parent)
        except ConfigError as e:
            raise ConfigError(f"{path} [setting] 'base': {e}") from None
        if base_path.resolve() == path.resolve() and not base_name.endswith(".toml"):
            # A variant file named like the shipped setting it changes (a copy elsewhere) means that one.
            base_path = _find(base_name, settings_dir)
        if base_path.resolve() == path.resolve():
            raise ConfigError(f"{path} [setting] 'base': a setting cannot be its own base")
        base_meta, base_sections = _read_file(base_path)
        if "base" in base_meta:
            raise ConfigError(
                f"{path} [setting] 'base': {base_name!r} has a base itself ({base_meta['base']!r}); "
                "one level of inheritance only"
            )
        if "algo" in meta and meta["algo"] != base_meta["algo"]:
            raise ConfigError(
                f"{path} [setting] 'algo': {meta['algo']!r} differs from its base's {base_meta['algo']!r}"
            )
        meta.setdefault("algo", base_meta["algo"])
        layers.insert(0, (base_path, base_sections))
    classes = schema(meta["algo"])
    entries: dict[str, Entry] = {}
    for layer_path, layer in layers:
        for section in SECTIONS:
            cls = classes[section]
            where = f"{layer_path} [{section}]"
            check_keys(cls, layer[section], where)
            hints = field_types(cls)
            for key, raw in layer[section].items():
                value, source, origin = parse_entry(raw, f"{where} '{key}'")
                value = convert(value, hints[key], f"{where} '{key}'")
                entries[f"{section}.{key}"] = Entry(value, source, origin, str(layer_path))
    setting = Setting(
        name=path.stem,
        path=path,
        title=meta["title"],
        citation=meta["citation"],
        algo=meta["algo"],
        base=base_name,
        description=meta.get("description", ""),
        entries=entries,
        deviations=tuple(meta.get("deviations", ())),
    )
    build_sections(setting, classes)
    return setting


def build_sections(setting: Setting, classes: Mapping[str, type]) -> dict[str, Any]:
    """Instances of the section dataclasses (their own validation runs). An error names the file
    that set the value the class rejected (a profile's, or the plan's), else the setting file."""
    built = {}
    for section in SECTIONS:
        cls = classes[section]
        try:
            built[section] = build(cls, setting.section(section), f"{setting.path} [{section}]")
        except ConfigError as e:
            raise ConfigError(_blame(setting, section, cls, e)) from e
    return built


def _blame(setting: Setting, section: str, cls: type, error: ConfigError) -> str:
    """``error``'s message, naming the file of the entry whose field the class's check names
    (``RunnerConfig.n_steps must be ...``) when that entry did not come from the setting file."""
    cause = error.__cause__
    if not isinstance(cause, ValueError | TypeError):
        return str(error)
    found = re.search(rf"{cls.__name__}\.(\w+)", str(cause))
    entry = setting.entries.get(f"{section}.{found.group(1)}") if found else None
    if entry is None or entry.file in ("", str(setting.path)):
        return str(error)
    return f"{entry.file} '{section}.{found.group(1)}': {str(cause).splitlines()[0]}"


def with_defaults(setting: Setting, classes: Mapping[str, type]) -> dict[str, Entry]:
    """The setting's entries plus every field it leaves to the dataclass default (origin ``default``)."""
    out = dict(setting.entries)
    for section in SECTIONS:
        cls = classes[section]
        for key, value in field_defaults(cls).items():
            name = f"{section}.{key}"
            if name not in out:
                out[name] = Entry(value, f"{cls.__module__}.{cls.__qualname__} default", "default", "")
    return dict(sorted(out.items(), key=lambda kv: (SECTIONS.index(kv[0].split(".")[0]), kv[0])))


def override(setting: Setting, changes: Mapping[str, Entry], classes: Mapping[str, type]) -> Setting:
    """``setting`` with some entries replaced (profiles, plans); the result is validated again."""
    entries = dict(setting.entries)
    for name, entry in changes.items():
        section, _, key = name.partition(".")
        hints = field_types(classes[section])
        if key not in hints:
            cls = classes[section]
            raise ConfigError(
                f"{entry.file} '{name}': unknown key '{key}' for {cls.__module__}.{cls.__qualname__}; "
                + unknown_key_message(key, list(hints))
            )
        value = convert(entry.value, hints[key], f"{entry.file} '{name}'")
        entries[name] = dataclasses.replace(entry, value=value)
    changed = dataclasses.replace(setting, entries=entries)
    build_sections(changed, classes)
    return changed


def setting_configs(
    name_or_path: str, overrides: Mapping[str, Any] | None = None, settings_dir: Path = SETTINGS_DIR
) -> dict[str, Any]:
    """The typed configs (section -> ``algo`` Config, ``env``, ``sampler``, ``runner``) of setting
    ``name_or_path`` with ``{"section.key": value}`` overrides applied and validated: how benches,
    tests and regression tasks take a published setting without restating its values."""
    setting = load_setting(name_or_path, settings_dir)
    classes = default_schema(setting.algo)
    if overrides:
        changes = {
            key: Entry(value, "caller override", "harness", "<caller>") for key, value in overrides.items()
        }
        setting = override(setting, changes, classes)
    return build_sections(setting, classes)


def train_config(setting: Setting, classes: Mapping[str, type]) -> Any:
    """The ``algorithms.run_config.TrainConfig`` of a setting (which must give ``env.id``)."""
    from algorithms.run_config import TrainConfig

    built = build_sections(setting, classes)
    try:
        return TrainConfig(
            algo=setting.algo,
            algo_config=built["algo"],
            env=built["env"],
            sampler=built["sampler"],
            runner=built["runner"],
            origins=tuple(
                (config_json_key(name), e.origin, e.source)
                for name, e in setting.entries.items()
                if e.origin == COMMAND_LINE
            ),
        )
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{setting.path}: {str(e).splitlines()[0]}") from e


def config_json_key(name: str) -> str:
    """A settings key (``algo.learning_rate``) as config.json names it (``algo_config.learning_rate``)."""
    section, _, key = name.partition(".")
    return f"{'algo_config' if section == 'algo' else section}.{key}"


# ``--set`` (repro/cli.py): ``section.key=value``; a value is read as a TOML value (``1e-4``, ``true``,
# ``[64, 64]``, ``"text"``), and text that is no TOML value is taken as a string (``CartPole-v1``).
# Commas outside brackets and quotes separate the values of a sweep (``1e-4,3e-4``).
SET_OPTION = "--set"
# Values ``run`` sets per job: given with their own options, never with --set.
PER_JOB_KEYS = {"env.id": "--env (or --games)", "runner.seed": "--seeds"}
Overrides = dict[str, tuple[tuple[str, Any], ...]]  # "section.key" -> ((text, value), ...)


def _split_values(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, braces and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _toml_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(texts: Sequence[str]) -> Overrides:
    """``--set`` texts -> ``{"section.key": ((text, value), ...)}``; more than one value is a sweep.
    A malformed text, an unknown section, a per-job key or a key given twice is a one-line
    ``ConfigError`` naming the option and the text. Whether the key exists and the value has its
    type is checked where the setting is known (``override``, with the same checks as a file)."""
    out: Overrides = {}
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip()
        section, dot, field = key.partition(".")
        where = f"{SET_OPTION} {text!r}"
        if not sep or not dot or not field or not values.strip():
            raise ConfigError(f"{where}: expected section.key=value (e.g. algo.learning_rate=3e-4)")
        if section not in SECTIONS:
            raise ConfigError(f"{where}: unknown section '{section}'; sections: {', '.join(SECTIONS)}")
        if key in PER_JOB_KEYS:
            raise ConfigError(f"{where}: '{key}' is set per job; give it with {PER_JOB_KEYS[key]}")
        if key in out:
            raise ConfigError(f"{where}: '{key}' is given twice; list a sweep's values in one --set (a,b,c)")
        parts = [p.strip() for p in _split_values(values)]
        if not all(parts):
            raise ConfigError(f"{where}: an empty value between commas")
        if len(set(parts)) != len(parts):
            raise ConfigError(f"{where}: a value is listed twice")
        out[key] = tuple((p, _toml_value(p)) for p in parts)
        _check_distinct(where, out[key])
    return out


def _check_distinct(where: str, values: Sequence[tuple[str, Any]]) -> None:
    """A sweep's values written differently but equal (``1e-3,0.001``, ``1000,1_000``) would make two
    arms of one config, run twice under two names: a one-line ``ConfigError`` naming both."""
    for i, (text, value) in enumerate(values):
        same = next(
            (t for t, v in values[:i] if v == value and isinstance(v, bool) == isinstance(value, bool)), None
        )
        if same is not None:
            raise ConfigError(f"{where}: {same} and {text} are the same value")


def command_line_entries(point: Mapping[str, tuple[str, Any]]) -> dict[str, Entry]:
    """One value per key (a sweep's point) as entries of origin ``COMMAND_LINE``."""
    return {
        key: Entry(value, f"{SET_OPTION} {key}={text}", COMMAND_LINE, SET_OPTION)
        for key, (text, value) in point.items()
    }
