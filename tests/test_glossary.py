"""One name per idea: the Glossary of docs/ARCHITECTURE.md lists every config field and every key of
the shipped data files, and no old name (``algorithms.configs.RENAMED``) is in use anywhere.

A name counts as listed when it opens a row of one of the Glossary's tables (``| `name` | ...``):
a name that only appears in passing, in prose or in another name's row, is not explained.

An algorithm's own field (one that only its ``Config`` declares; a subclass inherits it with its
meaning) may instead be explained where it is declared, in the ``Attributes:`` section of that
``Config``'s docstring (Google style), so that adding an algorithm is its module and its setting.
A name is explained in one place: never in both. A name two configs declare is one idea across
algorithms and has a Glossary row.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from algorithms import registry
from algorithms.configs import RENAMED
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig
from repro.settings import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
# Settings, profiles, plans and the regression suite, wherever they are shipped; the result pages'
# own settings and profiles (docs/results/<study>/) are the same kinds of file.
DATA_FILE_GLOBS = (
    "repro/configs/settings/*.toml",
    "repro/configs/profiles/*.toml",
    "repro/configs/plans/*.toml",
    "analysis/regress/**/*.toml",
    "docs/results/**/*.toml",
)
_ROW_NAME = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)
# A Google-style ``Attributes:`` entry: ``    name: text`` or ``    name (type): text``.
_ATTRIBUTE = re.compile(r"^    (\w+)(?: \([^)]*\))?: \S", re.MULTILINE)
_RENAME_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|", re.MULTILINE)


def glossary_section(text: str) -> str:
    """The text of the ``## Glossary`` section, up to the next second-level heading."""
    start = text.index("\n## Glossary\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def listed_names(glossary: str) -> set[str]:
    """Names that open a table row of the glossary."""
    return set(_ROW_NAME.findall(glossary))


def without_row(text: str, name: str) -> str:
    """``text`` with the table rows that open with ``name`` deleted (what a test of this test uses)."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(f"| `{name}` |"))


def shipped_algorithms() -> list[str]:
    """The registry's algorithms that live in this repository's algorithm package."""
    package = f"{registry.PACKAGE}."
    return sorted(name for name, module in registry.ALGORITHMS.items() if module.startswith(package))


def config_classes() -> list[type]:
    algorithms = [registry.config_class(name) for name in shipped_algorithms()]
    return [*algorithms, EnvConfig, SamplerConfig, RunnerConfig]


def config_fields(classes: list[type]) -> set[str]:
    return {field.name for cls in classes for field in dataclasses.fields(cls)}


def attribute_docs(cls: type) -> set[str]:
    """The names the ``Attributes:`` section of ``cls``'s own docstring explains."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    _, found, rest = doc.partition("\nAttributes:\n")
    section = itertools.takewhile(lambda line: not line or line.startswith(" "), rest.splitlines())
    return set(_ATTRIBUTE.findall("\n".join(section))) if found else set()


def declared_by(cls: type, name: str) -> type:
    """The class that declares field ``name`` of ``cls`` first (the base, where a subclass only
    changes its default)."""
    return [k for k in cls.__mro__ if name in inspect.get_annotations(k)][-1]


def declarers(classes: list[type]) -> dict[str, set[type]]:
    """Field name -> the classes that declare it, for the fields of ``classes``."""
    found: dict[str, set[type]] = {}
    for cls in classes:
        for field in dataclasses.fields(cls):
            found.setdefault(field.name, set()).add(declared_by(cls, field.name))
    return found


def documented_with_config(classes: list[type], own_only: bool = True) -> set[str]:
    """Fields the ``Attributes:`` of a class that declares them explains: only those that one class
    alone declares (``own_only``), or all of them."""
    return {
        name
        for name, found in declarers(classes).items()
        if (len(found) == 1 or not own_only) and any(name in attribute_docs(cls) for cls in found)
    }


def data_files() -> list[Path]:
    return sorted({path for pattern in DATA_FILE_GLOBS for path in ROOT.glob(pattern)})


def key_paths(table: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key of a parsed TOML file as its path of table names. An entry (``{ value, source,
    origin }``) is a key, and each of its own keys is one too; an array of tables (``[[task]]``)
    contributes its tables' keys under its name."""
    for key, value in table.items():
        path = (*prefix, key)
        if isinstance(value, dict) and "value" in value:
            yield path
            yield from ((inner,) for inner in value)
        elif isinstance(value, dict):
            yield from key_paths(value, path)
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            for item in value:
                yield from key_paths(item, path)
        else:
            yield path


def glossary_name(path: tuple[str, ...]) -> str:
    """The name a key goes by in the glossary: a config field under its own name (``[algo]``,
    ``[r2d1.runner]``), any other key as ``table.key`` (``setting.title``, ``task.arm``)."""
    if len(path) >= 2 and path[-2] in SECTIONS:
        return path[-1]
    return ".".join(path[-2:])


def file_keys(paths: list[Path] | None = None) -> dict[str, set[str]]:
    """Glossary name -> the data files (``paths``, by default the shipped ones) that use it."""
    used: dict[str, set[str]] = {}
    for path in data_files() if paths is None else paths:
        with path.open("rb") as f:
            for key in key_paths(tomllib.load(f)):
                used.setdefault(glossary_name(key), set()).add(str(path))
    return used


def missing_from(
    architecture_text: str, classes: list[type] | None = None, paths: list[Path] | None = None
) -> list[str]:
    """Fields of ``classes`` and keys of the data files at ``paths`` (by default the shipped ones)
    that neither a glossary row nor the declaring ``Config``'s ``Attributes:`` explains."""
    classes = config_classes() if classes is None else classes
    required = config_fields(classes) | set(file_keys(paths))
    explained = listed_names(glossary_section(architecture_text)) | documented_with_config(classes)
    return sorted(required - explained)


def explained_twice(architecture_text: str, classes: list[type] | None = None) -> list[str]:
    """Fields a glossary row and a declaring ``Config``'s ``Attributes:`` both explain."""
    classes = config_classes() if classes is None else classes
    listed = listed_names(glossary_section(architecture_text))
    return sorted(listed & documented_with_config(classes, own_only=False))


def test_the_inputs_are_found() -> None:
    # Guards the test itself: an empty registry or no data files would make every check pass.
    assert {"dqn", "r2d1", "ppo", "sac"} <= set(shipped_algorithms())
    assert len(data_files()) >= 20
    assert {
        "discount",
        "learning_starts_steps",
        "clip_grad_norm",
        "batch_B",
        "n_steps",
        "id",
    } <= config_fields(config_classes())
    assert {"setting.title", "value", "source", "discount"} <= set(file_keys())


def test_every_config_field_and_file_key_is_explained_once() -> None:
    assert missing_from(ARCHITECTURE.read_text()) == []
    assert explained_twice(ARCHITECTURE.read_text()) == []


@dataclasses.dataclass(frozen=True)
class _Own:
    """A config of its own.

    Attributes:
        own_rate (float): a field only this class declares,
            explained here.
        discount: gamma, as everywhere (a Glossary row explains it too).

    Not an attribute:
        stray_name: after the section.
    """

    own_rate: float = 0.1
    stray_name: int = 0
    discount: float = 0.99


@dataclasses.dataclass(frozen=True)
class _Sub(_Own):
    own_rate: float = 0.2  # a new default, the same field


@dataclasses.dataclass(frozen=True)
class _Other:
    """Another config.

    Attributes:
        own_rate: the same name, declared again: one name, two ideas?
    """

    own_rate: float = 0.3


def test_an_own_field_is_explained_where_it_is_declared_and_nowhere_else() -> None:
    text, shipped = ARCHITECTURE.read_text(), config_classes()
    assert attribute_docs(_Own) == {"own_rate", "discount"} and attribute_docs(_Sub) == set()
    assert declared_by(_Sub, "own_rate") is _Own
    assert missing_from(text, [*shipped, _Own, _Sub]) == ["stray_name"]
    assert explained_twice(text, [*shipped, _Own, _Sub]) == ["discount"]
    # Declared by two classes: a shared name needs a Glossary row.
    assert missing_from(text, [*shipped, _Own, _Other]) == ["own_rate", "stray_name"]


def test_a_deleted_row_is_reported() -> None:
    text = ARCHITECTURE.read_text()
    # clip_grad_norm also appears in the old-names table, but not at the start of a row.
    assert missing_from(without_row(text, "clip_grad_norm")) == ["clip_grad_norm"]
    assert missing_from(without_row(text, "setting.citation")) == ["setting.citation"]
    assert missing_from(without_row(text, "origin")) == ["origin"]


def test_the_glossary_maps_every_old_name_to_its_new_one() -> None:
    renames = dict(_RENAME_ROW.findall(glossary_section(ARCHITECTURE.read_text())))
    assert {old: renames.get(old) for old in RENAMED} == RENAMED


def test_no_old_name_is_a_config_field_or_file_key() -> None:
    fields = {old for old in RENAMED if old in config_fields(config_classes())}
    in_files = {
        f"{name} ({', '.join(sorted(files))})"
        for name, files in file_keys().items()
        if name.rsplit(".", 1)[-1] in RENAMED
    }
    assert fields == set()
    assert in_files == set()
