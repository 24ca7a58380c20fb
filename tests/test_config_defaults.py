"""Published values have one home: each algorithm's ``Config()`` defaults are its canonical settings
file's values.

A settings file whose ``[setting]`` table says ``defaults_of = "<algo>"`` is that algorithm's
canonical setting (``r2d2_paper`` for ``r2d1``, ``dqn_nature`` for ``dqn``, ...). The file is where
each value's source is written, for every field (but one whose default is ``None``, which TOML
cannot state): the dataclass repeats the values so that code building ``Config()`` directly runs
the setting, and the test of each algorithm, found through ``algorithms.registry``, checks the two
are equal field by field (through the settings loader, so a base file's values count). No list of
algorithms or files is written here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_glossary import shipped_algorithms

from algorithms import registry
from protocol.files import SETTINGS_DIR, read_toml
from repro.settings import build_sections, default_schema, load_setting


def canonical_settings(settings_dir: Path = SETTINGS_DIR) -> dict[str, list[Path]]:
    """Algorithm -> the settings files in ``settings_dir`` that declare ``defaults_of`` it."""
    found: dict[str, list[Path]] = {}
    for path in sorted(Path(settings_dir).glob("*.toml")):
        algo = read_toml(path).get("setting", {}).get("defaults_of")
        if algo is not None:
            found.setdefault(algo, []).append(path)
    return found


def default_differences(algo: str, path: Path, settings_dir: Path = SETTINGS_DIR) -> list[str]:
    """``field: Config() value != file value`` for each field where algorithm ``algo``'s ``Config()``
    differs from the setting at ``path`` (its base included), and ``field: Config() value, no entry``
    for each field the setting leaves to the default (but a ``None`` default); a file for another
    algorithm is one difference naming both."""
    setting = load_setting(str(path), settings_dir)
    if setting.algo != algo:
        return [f"{path.name} is defaults_of {algo!r} but runs algo {setting.algo!r}"]
    default = registry.config_class(algo)()
    built = build_sections(setting, default_schema(algo))["algo"]
    pairs = {
        field.name: (getattr(default, field.name), getattr(built, field.name))
        for field in dataclasses.fields(default)
    }
    unstated = [
        f"{name}: Config() {mine!r}, no entry in {path.name}"
        for name, (mine, _) in pairs.items()
        if f"algo.{name}" not in setting.entries and mine is not None
    ]
    return unstated + [
        f"{name}: Config() {mine!r} != {path.name} {theirs!r}"
        for name, (mine, theirs) in pairs.items()
        if mine != theirs
    ]


def test_every_shipped_algorithm_has_one_canonical_setting() -> None:
    found = canonical_settings()
    assert {algo: [p.name for p in paths] for algo, paths in found.items() if len(paths) > 1} == {}
    assert sorted(found) == shipped_algorithms()


@pytest.mark.parametrize("algo", shipped_algorithms())
def test_config_defaults_are_the_canonical_settings_values(algo: str) -> None:
    (path,) = canonical_settings()[algo]
    assert default_differences(algo, path) == []


def test_a_default_that_differs_from_its_file_is_named(tmp_path: Path) -> None:
    # Guards the check: the R2D2 file with rlpyt's layer before the LSTM, without an entry, and named
    # as another algorithm's canonical file.
    text = (SETTINGS_DIR / "r2d2_paper.toml").read_text()
    assert text.count("fc_size = { value = 0,") == 1
    (tmp_path / "r2d2_fc.toml").write_text(text.replace("fc_size = { value = 0,", "fc_size = { value = 512,"))
    assert canonical_settings(tmp_path) == {"r2d1": [tmp_path / "r2d2_fc.toml"]}
    differences = default_differences("r2d1", tmp_path / "r2d2_fc.toml")
    assert differences == ["fc_size: Config() 0 != r2d2_fc.toml 512"]
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("value_rescaling_eps =")]
    assert len(lines) == len(text.splitlines()) - 1
    (tmp_path / "r2d2_fc.toml").write_text("".join(lines))
    assert default_differences("r2d1", tmp_path / "r2d2_fc.toml") == [
        "value_rescaling_eps: Config() 0.001, no entry in r2d2_fc.toml"
    ]
    assert default_differences("dqn", tmp_path / "r2d2_fc.toml") == [
        "r2d2_fc.toml is defaults_of 'dqn' but runs algo 'r2d1'"
    ]
