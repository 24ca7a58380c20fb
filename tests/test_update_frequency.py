"""``env_steps_per_update``, the one name of the update frequency (docs/ARCHITECTURE.md, Glossary):
DQN's schedule and the Q-value policy gradients' count updates the same way, and the two old names
are refused in settings files and migrated in old run directories (``updates_per_step`` inverted)."""

from __future__ import annotations

import pytest
import torch

from algorithms.algos import dqn, td3
from algorithms.arrays import NamedArrays
from algorithms.configs import ConfigError, build, migrate_renamed
from algorithms.learners.qpg import ReplayFeed
from repro.cli import main

BASE = '[setting]\ntitle = "t"\ncitation = "c"\nbase = "{base}"\n'
OLD_KEY = '[algo]\n{key} = {{ value = {value}, source = "x" }}\n'


@pytest.mark.parametrize(
    ("base", "key", "value", "expected"),
    [
        (
            "dqn_nature",
            "train_every_steps",
            4,
            "key 'train_every_steps' was renamed to 'env_steps_per_update'",
        ),
        (
            "td3",
            "updates_per_step",
            1.0,
            "key 'updates_per_step' was renamed to 'env_steps_per_update' "
            "(its reciprocal: 1 / updates_per_step)",
        ),
    ],
)
def test_a_settings_file_with_an_old_name_is_refused_in_one_line(
    base, key, value, expected, tmp_path, capsys
):
    setting = tmp_path / "old.toml"
    setting.write_text(BASE.format(base=base) + OLD_KEY.format(key=key, value=value))
    assert main(["show", str(setting)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(setting.name) in err, err
    assert f"[algo]: {expected}" in err, err


def test_an_old_config_json_loads_with_the_new_name():
    assert migrate_renamed(dqn.Config, {"train_every_steps": 4}) == {"env_steps_per_update": 4}
    # Two updates per env step were written as updates_per_step 2: one update per half env step.
    migrated = migrate_renamed(td3.Config, {"updates_per_step": 2.0})
    assert migrated == {"env_steps_per_update": 0.5}
    assert build(td3.Config, migrated, "config.json [algo_config]").env_steps_per_update == 0.5
    with pytest.raises(ConfigError, match="was renamed to 'env_steps_per_update'"):
        build(td3.Config, {"updates_per_step": 2.0}, "x.toml [algo]")


def _batch(T: int, B: int) -> NamedArrays:
    return NamedArrays(
        observation=torch.zeros(T, B, 3),
        final_observation=torch.zeros(T, B, 3),
        action=torch.zeros(T, B, 1),
        reward=torch.zeros(T, B),
        terminated=torch.zeros(T, B, dtype=torch.bool),
        truncated=torch.zeros(T, B, dtype=torch.bool),
    )


@pytest.mark.parametrize(
    ("env_steps_per_update", "expected"), [(1.0, [6, 6, 6]), (0.5, [12, 12, 12]), (4.0, [1, 2, 1])]
)
def test_qpg_updates_one_per_env_steps_per_update_carrying_the_remainder(env_steps_per_update, expected):
    feed = ReplayFeed(100, 0.99, learning_starts_steps=1, env_steps_per_update=env_steps_per_update)
    assert [feed.append(_batch(3, 2)) for _ in range(3)] == expected  # 6 env steps per batch
