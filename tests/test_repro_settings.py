"""Strict loading of setting files into typed dataclasses, against small stand-in dataclasses.

The stand-ins play the role of an algorithm's ``Config``, ``EnvConfig``, ``SamplerConfig`` and
``RunnerConfig`` so that the loader's rules (inheritance, sources, types, unknown and missing
keys, the class's own validation) are tested independently of any real algorithm.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from algorithms.configs import ConfigError
from repro.inspect_settings import diff_rows
from repro.settings import Entry, load_setting, override, setting_configs, with_defaults


@dataclass(frozen=True)
class ToyAlgo:
    lr: float = 1e-3
    gamma: float = 0.99
    n_step: int = 1
    double: bool = True
    hidden: tuple[int, ...] = (64, 64)
    kind: Literal["a", "b"] = "a"
    clip: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"ToyAlgo.gamma must be in [0, 1], got {self.gamma}")


@dataclass(frozen=True)
class ToyEnv:
    id: str
    frameskip: int = 1


@dataclass(frozen=True)
class ToySampler:
    batch_B: int = 1


@dataclass(frozen=True)
class ToyRunner:
    n_steps: int = 100
    seed: int = 0


def toy_schema(algo: str) -> dict[str, type]:
    if algo != "toy":
        raise ConfigError(f"unknown algorithm {algo!r}; known: toy")
    return {"algo": ToyAlgo, "env": ToyEnv, "sampler": ToySampler, "runner": ToyRunner}


BASE = """
[setting]
title = "Toy paper"
citation = "Toy et al. 2020"
algo = "toy"

[algo]
lr = { value = 0.01, source = "Table 1" }
gamma = { value = 0.9, source = "Sec. 2" }
hidden = { value = [32, 32], source = "Appendix A", origin = "inherited" }

[env]
id = { value = "pong", source = "harness default", origin = "harness" }
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, name: str):
    return load_setting(str(tmp_path / f"{name}.toml"), tmp_path, toy_schema)


def test_values_sources_and_types(tmp_path):
    write(tmp_path, "base", BASE)
    s = load(tmp_path, "base")
    assert s.algo == "toy" and s.title == "Toy paper"
    assert s.entries["algo.lr"] == Entry(0.01, "Table 1", "published", str(tmp_path / "base.toml"))
    assert s.entries["algo.hidden"].value == (32, 32)  # list -> tuple, as the field is typed
    assert s.entries["algo.hidden"].origin == "inherited"
    full = with_defaults(s, toy_schema("toy"))
    assert full["algo.n_step"].origin == "default" and full["algo.n_step"].value == 1
    assert full["runner.n_steps"].value == 100


def test_inheritance_overrides_and_keeps_sources(tmp_path):
    write(tmp_path, "base", BASE)
    write(
        tmp_path,
        "child",
        """
        [setting]
        title = "Toy, corrected"
        citation = "this harness"
        base = "base"

        [algo]
        gamma = { value = 0.99, source = "fixed: see note 1" }
        n_step = { value = 3, source = "Sec. 3" }
        """,
    )
    child = load(tmp_path, "child")
    assert child.algo == "toy" and child.base == "base"
    assert child.entries["algo.lr"].source == "Table 1"  # inherited entry keeps its source
    assert child.entries["algo.gamma"] == Entry(
        0.99, "fixed: see note 1", "published", str(tmp_path / "child.toml")
    )
    classes = toy_schema("toy")

    class R:  # the shape diff_rows reads
        def __init__(self, s):
            self.entries = with_defaults(s, classes)

    differing = [k for k, _, _ in diff_rows(R(load(tmp_path, "base")), R(child))]
    assert differing == ["algo.gamma", "algo.n_step"]


def test_int_accepted_for_float_and_optional(tmp_path):
    write(tmp_path, "base", BASE + '\n[runner]\nn_steps = { value = 5, source = "x" }\n')
    text = BASE.replace('lr = { value = 0.01, source = "Table 1" }', 'lr = { value = 1, source = "Table 1" }')
    write(tmp_path, "ints", text.replace("[env]", '[env]\nframeskip = { value = 4, source = "x" }'))
    s = load(tmp_path, "ints")
    assert s.entries["algo.lr"].value == 1.0 and isinstance(s.entries["algo.lr"].value, float)
    write(tmp_path, "opt", BASE.replace("[env]", 'clip = { value = 10, source = "x" }\n[env]'))
    assert load(tmp_path, "opt").entries["algo.clip"].value == 10.0


def test_override_is_validated(tmp_path):
    write(tmp_path, "base", BASE)
    s = load(tmp_path, "base")
    classes = toy_schema("toy")
    changed = override(s, {"runner.n_steps": Entry(7, "profile", "profile", "p.toml")}, classes)
    assert changed.entries["runner.n_steps"].value == 7
    with pytest.raises(ConfigError, match="expected an integer"):
        override(s, {"runner.n_steps": Entry(7.5, "profile", "profile", "p.toml")}, classes)
    with pytest.raises(ConfigError, match="unknown key 'n_stepz'"):
        override(s, {"runner.n_stepz": Entry(7, "profile", "profile", "p.toml")}, classes)


# --- malformed files: each is a one-line ConfigError naming the file and the problem ---------------
ALGO_LINE = 'lr = { value = 0.01, source = "Table 1" }'
MALFORMED = {
    "toml_syntax": (BASE + "\nlr = = 3\n", "TOML syntax error"),
    "no_setting_table": (BASE.replace("[setting]", "[settings]"), "unknown table [settings]"),
    "missing_setting_table": ("\n".join(BASE.splitlines()[6:]), "missing [setting] table"),
    "missing_title": (BASE.replace('title = "Toy paper"', ""), "missing required key 'title'"),
    "missing_citation": (BASE.replace('citation = "Toy et al. 2020"', ""), "missing required key 'citation'"),
    "missing_algo": (BASE.replace('algo = "toy"', ""), "missing required key 'algo'"),
    "unknown_meta_key": (
        BASE.replace('title = "Toy paper"', 'title = "x"\ntitel = "x"'),
        "unknown key 'titel'",
    ),
    "meta_wrong_type": (BASE.replace('title = "Toy paper"', "title = 3"), "'title': expected a string"),
    "unknown_table": (BASE + "\n[optim]\nx = 1\n", "unknown table [optim]"),
    "section_not_table": ("runner = 3\n" + BASE, "[runner] must be a table"),
    "unknown_algo_key": (
        BASE.replace(ALGO_LINE, 'lrr = { value = 0.01, source = "T" }'),
        "unknown key 'lrr'",
    ),
    "bare_value": (BASE.replace(ALGO_LINE, "lr = 0.01"), "must be a table { value"),
    "entry_no_value": (BASE.replace(ALGO_LINE, 'lr = { source = "T" }'), "missing 'value'"),
    "entry_no_source": (BASE.replace(ALGO_LINE, "lr = { value = 0.01 }"), "missing 'source'"),
    "entry_empty_source": (
        BASE.replace(ALGO_LINE, 'lr = { value = 0.01, source = " " }'),
        "missing 'source'",
    ),
    "entry_bad_origin": (
        BASE.replace(ALGO_LINE, 'lr = { value = 0.01, source = "T", origin = "paper" }'),
        "origin 'paper' is not one of",
    ),
    "entry_unknown_field": (
        BASE.replace(ALGO_LINE, 'lr = { value = 0.01, sauce = "T" }'),
        "unknown field 'sauce'",
    ),
    "float_for_int": (
        BASE.replace(ALGO_LINE, 'n_step = { value = 1.5, source = "T" }'),
        "expected an integer",
    ),
    "bool_for_int": (
        BASE.replace(ALGO_LINE, 'n_step = { value = true, source = "T" }'),
        "expected an integer",
    ),
    "string_for_float": (
        BASE.replace(ALGO_LINE, 'lr = { value = "1e-3", source = "T" }'),
        "expected a number",
    ),
    "int_for_bool": (BASE.replace(ALGO_LINE, 'double = { value = 1, source = "T" }'), "expected true/false"),
    "scalar_for_tuple": (BASE.replace("[32, 32]", "32"), "expected a list"),
    "tuple_item_type": (BASE.replace("[32, 32]", '[32, "x"]'), "'hidden'[1]: expected an integer"),
    "literal_value": (BASE.replace(ALGO_LINE, 'kind = { value = "c", source = "T" }'), "'c' is not one of"),
    "post_init_rejects": (BASE.replace("value = 0.9,", "value = 1.5,"), "ToyAlgo.gamma must be in [0, 1]"),
    "missing_required_field": (
        BASE.replace('id = { value = "pong", source = "harness default", origin = "harness" }', ""),
        "missing required key 'id'",
    ),  # fmt: skip
    "unknown_algorithm": (BASE.replace('algo = "toy"', 'algo = "toyy"'), "unknown algorithm 'toyy'"),
    "unknown_base": (BASE.replace('algo = "toy"', 'base = "nope"'), "unknown setting 'nope'"),
    "own_base": (BASE.replace('algo = "toy"', 'algo = "toy"\nbase = "bad"'), "cannot be its own base"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_setting_is_one_line_error_naming_file(tmp_path, case):
    text, expected = MALFORMED[case]
    path = write(tmp_path, "bad", text)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "bad")
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    if case not in ("unknown_algorithm", "unknown_base"):
        assert str(path) in message


def test_two_level_inheritance_refused(tmp_path):
    write(tmp_path, "base", BASE)
    write(tmp_path, "mid", '[setting]\ntitle = "m"\ncitation = "c"\nbase = "base"\n')
    write(tmp_path, "leaf", '[setting]\ntitle = "l"\ncitation = "c"\nbase = "mid"\n')
    with pytest.raises(ConfigError, match="one level of inheritance only"):
        load(tmp_path, "leaf")


def test_child_cannot_change_algorithm(tmp_path):
    write(tmp_path, "base", BASE)
    write(tmp_path, "child", '[setting]\ntitle = "l"\ncitation = "c"\nbase = "base"\nalgo = "other"\n')
    with pytest.raises(ConfigError, match="differs from its base"):
        load(tmp_path, "child")


def test_not_utf8(tmp_path):
    (tmp_path / "bad.toml").write_bytes(b'[setting]\ntitle = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="bad.toml"):
        load(tmp_path, "bad")


def test_setting_configs_by_name_with_overrides():
    from algorithms.algos import dqn

    configs = setting_configs("dqn_minatar", {"algo.batch_size": 64, "env.id": "minatar_asterix"})
    assert isinstance(configs["algo"], dqn.Config)
    assert (configs["algo"].batch_size, configs["algo"].optimizer_eps) == (64, 0.01)
    assert configs["env"].id == "minatar_asterix" and configs["runner"].n_steps == 5_000_000
    with pytest.raises(ConfigError, match="<caller> 'algo.batch_sise': unknown key 'batch_sise'"):
        setting_configs("dqn_minatar", {"algo.batch_sise": 64})


def test_every_shipped_setting_names_its_env():
    """Every shipped setting gives env.id (itself or through its base), so that its four configs build
    by name without a plan (``setting_configs``, ``python -m repro show``); the build itself is
    tests/test_repro_cli.py's test_every_shipped_setting_loads_and_builds."""
    from repro.settings import available_settings

    assert [name for name in available_settings() if "env.id" not in load_setting(name).entries] == []


def test_zoo_settings_are_in_this_harness_units():
    """rl-baselines3-zoo's values (hyperparams/*.yml @ 22e3ff2, SB3 2.9 defaults) converted by hand."""
    ppo = setting_configs("ppo_cartpole_zoo")
    # n_envs 8 x n_steps 32; lin_0.001 and lin_0.2 reach 0 at n_timesteps 1e5; SB3's vf_coef 0.5
    # weights mean((R - V)^2), this harness's value loss is half of it; SB3 clips no value loss.
    assert (ppo["sampler"].batch_T, ppo["sampler"].batch_B) == (32, 8)
    assert ppo["algo"].anneal_env_steps == ppo["runner"].n_steps == 100_000 and ppo["algo"].anneal_clip
    assert (ppo["algo"].value_coef, ppo["algo"].clip_value_loss) == (1.0, False)
    assert setting_configs("ppo_halfcheetah")["algo"].value_coef == pytest.approx(2 * 0.58096)
    dqn = setting_configs("dqn_cartpole_zoo")
    # train_freq 256, gradient_steps 128: 128 updates per 256-step batch, the target copied once per
    # block; exploration_fraction 0.16 of 5e4 steps.
    assert (dqn["sampler"].batch_T, dqn["algo"].env_steps_per_update) == (256, 2)
    assert (dqn["algo"].target_update_period_updates, dqn["algo"].eps_decay_steps) == (128, 8_000)
    # MountainCar-v0: target_update_interval 600 env steps at 8 updates per 16 steps; 0.2 x 1.2e5.
    car = setting_configs("dqn_mountaincar")["algo"]
    assert (car.target_update_period_updates, car.eps_decay_steps) == (300, 24_000)
    # LunarLander-v3: lin_0.00083 over n_timesteps 2e5.
    lander = setting_configs("a2c_lunarlander")["algo"]
    assert (lander.learning_rate, lander.anneal_env_steps) == (8.3e-4, 200_000)


def test_a_variant_named_like_its_shipped_base_inherits_from_it(tmp_path):
    variant = tmp_path / "dqn_minatar.toml"
    variant.write_text(
        '[setting]\ntitle = "variant"\ncitation = "x"\nbase = "dqn_minatar"\n'
        '[algo]\nbatch_size = { value = 64, source = "x", origin = "harness" }\n'
    )
    setting = load_setting(str(variant))
    assert setting.base == "dqn_minatar" and setting.entries["algo.batch_size"].value == 64
    assert setting.entries["algo.optimizer_eps"].value == 0.01  # from the shipped file
    variant.write_text(f'[setting]\ntitle = "x"\ncitation = "x"\nbase = "{variant}"\n')
    with pytest.raises(ConfigError, match="cannot be its own base"):
        load_setting(str(variant))
