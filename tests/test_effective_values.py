"""Values in effect that another config key sets (R2D1's swapped priority exponents): declared by the
Config, recorded in a run's metadata.json at its start, read back by analysis and compared as run."""

import json

import numpy as np
import pandas as pd

from algorithms.algos import r2d1
from algorithms.rundir import EFFECTIVE_VALUES_KEY, METADATA_FILE, RunDir, declared_effective_values, run_path
from analysis.configdiff import InEffect, config_diff, effective_table, run_effective_values
from analysis.runs import load_experiment

SWAPPED = r2d1.Config(priority_alpha=0.9, priority_beta=0.6, swap_priority_exponents=True)


def test_declared_effective_values_as_metadata_records_them():
    recorded = declared_effective_values("algo_config", SWAPPED)
    assert {k: v["value"] for k, v in recorded.items()} == {
        "algo_config.priority_alpha": 0.6,
        "algo_config.priority_beta": 0.9,
    }
    assert all(v["reason"].startswith("swap_priority_exponents = true") for v in recorded.values())
    assert declared_effective_values("algo_config", r2d1.Config()) == {}
    assert declared_effective_values("env", object()) == {}  # a class that declares nothing


def _config(swap: bool, seed: int) -> dict:
    return {
        "algo": "r2d1",
        "algo_config": {"priority_alpha": 0.9, "priority_beta": 0.6, "swap_priority_exponents": swap},
        "runner": {"seed": seed},
    }


def test_run_dirs_record_effective_values_and_the_diff_compares_them_as_run(tmp_path):
    for arm, config in (("published", SWAPPED), ("corrected", r2d1.Config())):
        for seed in (0, 1):
            # The call train.py makes when it opens a run.
            run = RunDir.open(
                run_path(tmp_path, "exp", arm, "pong", seed),
                _config(config.swap_priority_exponents, seed),
                {"seed": seed},
                resume=False,
                effective_values=declared_effective_values("algo_config", config),
            )
            run.close()
    published = tmp_path / "exp/published/pong/seed0"
    metadata = json.loads((published / METADATA_FILE).read_text())
    assert metadata[EFFECTIVE_VALUES_KEY]["algo_config.priority_alpha"]["value"] == 0.6
    # A resumed run keeps the metadata it started with.
    RunDir.open(published, _config(True, 0), {"seed": 0}, effective_values={}).close()
    assert json.loads((published / METADATA_FILE).read_text()) == metadata

    exp = load_experiment(tmp_path / "exp")
    effective = run_effective_values(exp.metadata)
    why = SWAPPED.effective_values()["priority_alpha"][1]
    assert sorted(effective) == [("published", "pong", 0), ("published", "pong", 1)]
    assert effective[("published", "pong", 1)] == {
        "algo_config.priority_alpha": (0.6, why),
        "algo_config.priority_beta": (0.9, why),
    }
    # As stated, the arms differ only in the switch; as run, in both exponents too.
    assert config_diff(exp.configs).key.tolist() == ["algo_config.swap_priority_exponents"]
    diff = config_diff(exp.configs, effective).set_index("key")
    assert diff.index.tolist() == [
        "algo_config.priority_alpha",
        "algo_config.priority_beta",
        "algo_config.swap_priority_exponents",
    ]
    assert diff.loc["algo_config.priority_alpha", "published"] == InEffect(0.9, 0.6, why)
    assert diff.loc["algo_config.priority_alpha", "corrected"] == 0.9
    assert diff.loc["algo_config.priority_beta", "published"] == InEffect(0.6, 0.9, why)
    table = effective_table(exp.configs, effective)
    assert table.to_dict("records") == [
        {"arm": "published", "key": "algo_config.priority_alpha", "stated": 0.9, "in_effect": 0.6,
         "reason": why, "runs": 2},
        {"arm": "published", "key": "algo_config.priority_beta", "stated": 0.6, "in_effect": 0.9,
         "reason": why, "runs": 2},
    ]  # fmt: skip


def test_runs_without_a_record_read_as_none():
    metadata = pd.DataFrame(
        [
            {"arm": "a", "env": "pong", "seed": 0, "effective_values.algo_config.x.value": 2,
             "effective_values.algo_config.x.reason": "y = true"},
            {"arm": "a", "env": "pong", "seed": 1, "effective_values.algo_config.x.value": np.nan,
             "effective_values.algo_config.x.reason": np.nan},
        ]
    )  # fmt: skip
    assert run_effective_values(metadata) == {("a", "pong", 0): {"algo_config.x": (2, "y = true")}}
    assert run_effective_values(pd.DataFrame(columns=["arm", "env", "seed"])) == {}
