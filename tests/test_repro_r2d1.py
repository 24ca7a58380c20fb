"""The R2D1 arms: values against the published reference tables, the documented deviations exactly,
and the r2d1 plan's 42 smoke jobs. (Real smoke jobs of both arms take about a minute of CPU each
pair: ``make reproduce-r2d1 SEEDS=1 GAMES=pong PROFILE=smoke`` runs them.)
"""

from __future__ import annotations

import csv
import re

import pytest

from protocol.files import CONFIG_DIR
from repro.cli import main
from repro.inspect_settings import diff_rows, resolve_label

REFERENCE = CONFIG_DIR / "reference"


def reference_numbers(name: str) -> dict[str, float]:
    """param -> the first number in its value column (``"40 (20 also studied)"`` -> 40.0)."""
    out = {}
    with open(REFERENCE / name, newline="") as f:
        for row in csv.DictReader(f):
            match = re.match(r"\s*~?([0-9][0-9.]*(?:e-?[0-9]+)?)", row["value"])
            if match:
                out[row["param"]] = float(match.group(1))
    return out


# r2d2_hyperparameters.csv param -> key of the resolved r2d2_paper setting
R2D2_KEYS = {
    "discount_gamma": "algo.discount",
    "n_step": "algo.n_step",
    "sequence_length_m": "algo.sequence_length_steps",
    "burn_in_l": "algo.burn_in_steps",
    "sequence_overlap": "algo.sequence_period_steps",  # overlap 40 of 80: a new sequence every 40 steps
    "priority_exponent_alpha": "algo.priority_alpha",
    "priority_mixing_eta": "algo.priority_eta",
    "importance_sampling_exponent_beta": "algo.priority_beta",
    "value_rescaling_epsilon": "algo.value_rescaling_eps",
    "lstm_size": "algo.lstm_size",
    "dueling_head_hidden": "algo.head_hidden_size",
    "learning_rate": "algo.learning_rate",
    "adam_epsilon": "algo.optimizer_eps",
    "minibatch_size": "algo.batch_size_sequences",
    "target_update_period": "algo.target_update_period_updates",
    "replay_capacity": "algo.replay_size_steps",
    "replay_ratio": "algo.replay_ratio",
    "gradient_clip_norm": "algo.clip_grad_norm",
    "frame_stack": "env.frame_stack",
    "number_of_actors": "sampler.batch_B",
    "actor_parameter_update_interval": "runner.async_param_sync_steps",
}
RLPYT_KEYS = {
    "discount": "algo.discount",
    "batch_T (sequence length)": "algo.sequence_length_steps",
    "warmup_T (burn-in)": "algo.burn_in_steps",
    "store_rnn_state_interval": "algo.sequence_period_steps",
    "learning_rate": "algo.learning_rate",
    "clip_grad_norm": "algo.clip_grad_norm",
    "min_steps_learn": "algo.learning_starts_steps",
    "n_step_return": "algo.n_step",
    "pri_eta": "algo.priority_eta",
    "value_scale_eps": "algo.value_rescaling_eps",
    "target_update_interval": "algo.target_update_period_updates",
}


def test_r2d2_paper_matches_the_published_table():
    table = reference_numbers("r2d2_hyperparameters.csv")
    setting = resolve_label("r2d2_paper").entries
    for param, key in R2D2_KEYS.items():
        assert setting[key].value == pytest.approx(table[param]), f"{key} vs {param}"
    assert setting["env.clip_rewards"].value is False and setting["env.episodic_life"].value is False
    assert setting["env.full_action_space"].value is True
    assert setting["algo.eps_per_env"].origin == "inherited"  # Ape-X, via Table 2's caption
    assert setting["algo.clip_grad_norm"].origin == "unverified"


def test_rlpyt_published_matches_rlpyt_config():
    table = reference_numbers("rlpyt_r2d1_config_defaults.csv")
    setting = resolve_label("rlpyt_r2d1_published").entries
    for param, key in RLPYT_KEYS.items():
        assert setting[key].value == pytest.approx(table[param]), f"{key} vs {param}"
    assert setting["algo.batch_size_sequences"].value == 64  # r2d1_long / async_gpu
    assert setting["algo.replay_ratio"].value == 1.0  # r2d1_long


# Deviation table of repro/configs/README.md: key -> (rlpyt as published, corrected)
DEVIATIONS = {
    "algo.swap_priority_exponents": (True, False),
    "algo.initial_priority_one_step": (True, False),
    "algo.initial_priority_no_alpha": (True, False),
    "algo.initial_priority_half_segment": (1, 0),
    "algo.replay_ratio": (1.0, 0.8),
    "algo.replay_ratio_counts_burnin": (True, False),
    "algo.nstep_done_bug": (True, False),
    "env.full_action_space": (False, True),
    # Differences of design, rlpyt's in the published arm, R2D2's in the corrected one.
    "algo.eps_per_env": ("log_spaced", "apex"),
    "algo.eps_final": (0.1, 0.01),
    "algo.fc_size": (512, 0),
}


def test_diff_published_vs_corrected_is_exactly_the_documented_deviations():
    rows = diff_rows(resolve_label("rlpyt_r2d1_published"), resolve_label("r2d1_corrected"))
    assert {key: (a.value, b.value) for key, a, b in rows} == DEVIATIONS
    readme = (CONFIG_DIR / "README.md").read_text()
    tables = readme[readme.index("## The R2D1 arms") : readme.index("### Which replay-ratio counting")]
    assert set(re.findall(r"`((?:algo|env)\.[a-z_]+)`", tables)) == set(DEVIATIONS)


def test_corrected_arm_targets_trained_counting():
    corrected = resolve_label("r2d1_corrected").entries
    other = resolve_label("r2d1_corrected_rr_with_burnin").entries
    assert corrected["algo.replay_ratio_counts_burnin"].value is False
    assert other["algo.replay_ratio_counts_burnin"].value is True
    assert [k for k, _, _ in diff_rows(resolve_label("r2d2_paper"), resolve_label("r2d1_corrected"))] == []


def test_r2d1_plan_dry_run(tmp_path, capsys):
    root = tmp_path / "runs"
    assert (
        main(
            [
                "run",
                "r2d1",
                "--seeds",
                "3",
                "--profile",
                "smoke",
                "--root",
                str(root),
                "--dry-run",
                "--no-probe",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "42 jobs, 403,200 env steps, 1,612,800 frames in total" in out
    for game in ("pong", "seaquest", "qbert", "chopper_command", "amidar", "gravitar", "asteroids"):
        assert f"rlpyt_r2d1_published/{game}/seed2" in out and f"r2d1_corrected/{game}/seed0" in out
    assert not root.exists()


@pytest.mark.parametrize(
    "argv", [["--seeds", "0"], ["--seeds", "-1"], ["--seeds", "2", "--games", "pong,sonic"]]
)
def test_r2d1_plan_bad_input(argv, tmp_path, capsys):
    root = tmp_path / "runs"
    assert main(["run", "r2d1", *argv, "--root", str(root)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not root.exists()


def test_smoke_profile_changes_only_budget(capsys):
    assert main(["diff", "r2d1_corrected", "r2d1_corrected@smoke"]) == 0
    out = capsys.readouterr().out
    changed = set(re.findall(r"^((?:algo|env|sampler|runner)\.[a-z_A-Z]+)\s", out, flags=re.M))
    assert changed == {
        "algo.replay_size_steps", "algo.learning_starts_steps", "sampler.batch_B", "sampler.eval_episodes",
        "sampler.eval_max_steps", "runner.n_steps", "runner.log_interval_steps",
    }  # fmt: skip
