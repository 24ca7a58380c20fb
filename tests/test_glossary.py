"""One name per idea: the Glossary of docs/ARCHITECTURE.md lists every config field and every key of
the shipped data files, and no old name (``algorithms.configs.RENAMED``) is in use anywhere.

A name counts as listed when it opens a row of one of the Glossary's tables (``| `name` | ...``):
a name that only appears in passing, in prose or in another name's row, is not explained.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from algorithms import registry
from algorithms.configs import RENAMED
from algorithms.envs.config import EnvConfig
from algorithms.train import RunnerConfig, SamplerConfig
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


def config_fields() -> set[str]:
    return {field.name for cls in config_classes() for field in dataclasses.fields(cls)}


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


def file_keys() -> dict[str, set[str]]:
    """Glossary name -> the data files (repository paths) that use it."""
    used: dict[str, set[str]] = {}
    for path in data_files():
        with path.open("rb") as f:
            for key in key_paths(tomllib.load(f)):
                used.setdefault(glossary_name(key), set()).add(str(path.relative_to(ROOT)))
    return used


def required_names() -> set[str]:
    return config_fields() | set(file_keys())


def missing_from(architecture_text: str) -> list[str]:
    """Required names that no glossary row lists."""
    return sorted(required_names() - listed_names(glossary_section(architecture_text)))


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
    } <= config_fields()
    assert {"setting.title", "value", "source", "discount"} <= set(file_keys())


def test_every_config_field_and_file_key_has_a_glossary_row() -> None:
    assert missing_from(ARCHITECTURE.read_text()) == []


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
    fields = {old for old in RENAMED if old in config_fields()}
    in_files = {
        f"{name} ({', '.join(sorted(files))})"
        for name, files in file_keys().items()
        if name.rsplit(".", 1)[-1] in RENAMED
    }
    assert fields == set()
    assert in_files == set()
