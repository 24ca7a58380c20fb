"""The experiment report: content, self-containment, escaping, and bad input."""

import json
import re

import pytest

from analysis.markdown import fmt
from analysis.synthetic import SyntheticArm, write_experiment
from reports.__main__ import main
from reports.build import build_report

ARMS = {
    "corrected": SyntheticArm(1.5, {"algo": "r2d1", "optim": {"clip_grad_norm": 80.0}}),
    "published": SyntheticArm(
        0.8, {"algo": "r2d1", "optim": {"clip_grad_norm": "<script>alert(1)</script>"}}
    ),
}
SECTIONS = ["what-ran", "config-diff", "learning-curves", "aggregates", "performance-profiles",
            "probability-of-improvement", "sample-efficiency", "published", "throughput",
            "problems"]  # fmt: skip


def _table_rows(html: str, table_id: str) -> int:
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return len(re.findall(r"<tr>", body))


@pytest.mark.slow
def test_report_is_self_contained_and_complete(tmp_path):
    exp = write_experiment(tmp_path, "exp", ARMS, ["pong", "qbert"], [0, 1], n_logs=4, eval_episodes=2)
    path = build_report(exp, reps=200)
    assert path == exp / "report.html"
    html = path.read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    # no network: every image is embedded, no scripts, no external stylesheets or links
    images = re.findall(r'<img [^>]*src="([^"]*)"', html)
    assert len(images) == 7 and all(src.startswith("data:image/png;base64,") for src in images)
    assert "<script" not in html and "http://" not in html and "https://" not in html
    # autoescaped: a config value cannot inject markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Video Pinball random 0.0" in html
    assert _table_rows(html, "aggregate-table") == 2
    assert _table_rows(html, "published-table") == 4  # 2 arms x 2 games
    assert _table_rows(html, "poi-table") == 2
    assert _table_rows(html, "config-diff-table") == 1
    assert _table_rows(html, "skipped-table") == 0


def test_damaged_runs_are_listed_and_the_report_still_builds(tmp_path, capsys):
    exp = write_experiment(tmp_path, "exp", ARMS, ["CartPole-v1"], [0, 1, 2], n_logs=3, eval_episodes=2)
    (exp / "published/CartPole-v1/seed2/config.json").unlink()
    progress = exp / "corrected/CartPole-v1/seed1/progress.csv"
    progress.write_bytes(progress.read_bytes()[:-7])  # truncated mid-row
    (exp / "corrected/CartPole-v1/seed2/status.json").write_text(
        json.dumps({"state": "failed", "updated": "now", "error": "CUDA out of memory"})
    )
    # A run "complete" by its status whose last row was written twice (two writers,
    # docs/results/run_integrity.md).
    repeated = exp / "published/CartPole-v1/seed1/progress.csv"
    repeated.write_text(repeated.read_text() + repeated.read_text().splitlines()[-1] + "\n")
    assert main(["build", str(exp), "--reps", "100"]) == 0
    path = capsys.readouterr().out.strip()
    html = open(path).read()
    assert _table_rows(html, "skipped-table") == 4
    assert "config.json missing" in html and "CUDA out of memory" in html
    assert "progress.csv damaged: env_steps" in html and "rows repeat or go backwards" in html
    # The truncated run is not complete (the scheduler's rule, which reruns it): left out, with why.
    assert "dropped a torn last line" in html and "the last row of progress.csv is torn" in html
    assert '<section id="published">' not in html  # CartPole has no published R2D2 score
    assert "reference-normalised" in html and _table_rows(html, "bounds-table") == 1


def test_no_complete_run_still_gives_a_page(tmp_path):
    exp = write_experiment(tmp_path, "exp", ARMS, ["pong"], [0], n_logs=2, state="running")
    html = build_report(exp, reps=100).read_text()
    assert "no complete run with a score" in html
    assert _table_rows(html, "skipped-table") == 2


def test_empty_experiment_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["build", str(tmp_path / "empty")]) == 2
    assert "no run directories under" in capsys.readouterr().err
    assert main(["build", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, text",
    [(None, "–"), (float("nan"), "–"), (True, "yes"), (12345, "12,345"), (40000.0, "40,000"),
     (0.123456, "0.1235"), (123456.7, "123,457"), ("pong", "pong")],
)  # fmt: skip
def test_fmt(value, text):
    assert fmt(value) == text


def test_arms_without_a_common_env_get_no_aggregate(tmp_path):
    exp = write_experiment(tmp_path, "exp", {"a": ARMS["corrected"]}, ["CartPole-v1"], [0], n_logs=3)
    write_experiment(tmp_path, "exp", {"b": ARMS["published"]}, ["Pendulum-v1"], [0], n_logs=3)
    html = build_report(exp, reps=100).read_text()
    assert "no env was run to completion by every arm" in html
    assert _table_rows(html, "final-table") == 2


def test_values_in_effect_show_next_to_the_stated_ones(tmp_path):
    def arm(skill: float, swap: bool) -> SyntheticArm:
        algo_config = {"priority_alpha": 0.9, "priority_beta": 0.6, "swap_priority_exponents": swap}
        return SyntheticArm(skill, {"algo": "r2d1", "algo_config": algo_config})

    arms = {"corrected": arm(1.5, False), "published": arm(0.8, True)}
    exp = write_experiment(tmp_path, "exp", arms, ["pong"], [0], n_logs=2)
    # What a run of the published arm records in metadata.json when it starts (RunDir.open's
    # effective_values, from r2d1.Config.effective_values).
    why = "swap_priority_exponents = true: the exponents trade values"
    metadata_file = exp / "published/pong/seed0/metadata.json"
    metadata = json.loads(metadata_file.read_text())
    metadata["effective_values"] = {
        "algo_config.priority_alpha": {"value": 0.6, "reason": why},
        "algo_config.priority_beta": {"value": 0.9, "reason": why},
    }
    metadata_file.write_text(json.dumps(metadata))
    html = build_report(exp, reps=100).read_text()
    diff = re.search(r'<table id="config-diff-table">.*?</table>', html, re.S).group(0)
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td>(.*?)</td>", diff, re.S)]
    # Columns: key, corrected, published (arms sorted).
    assert cells == [
        "algo_config.priority_alpha", "0.9", "0.6 in effect (stated 0.9)",
        "algo_config.priority_beta", "0.6", "0.9 in effect (stated 0.6)",
        "algo_config.swap_priority_exponents", "no", "yes",
    ]  # fmt: skip
    assert _table_rows(html, "effective-values-table") == 2
    assert why in html


def _eval_only_at_the_end(exp):
    for path in exp.glob("*/*/seed*/eval.csv"):
        lines = path.read_text().splitlines()
        last = lines[-1].split(",")[0]
        path.write_text("\n".join([lines[0]] + [x for x in lines[1:] if x.split(",")[0] == last]) + "\n")


def test_one_final_score_across_the_report_in_percent(tmp_path):
    """The aggregates, the per-env final table and the sample-efficiency curve are one quantity (the
    evaluations here), all in percent; the curve ends at the aggregates' IQM."""
    from analysis import aggregate
    from analysis.curves import EVAL_SOURCE, resample_curves, score_tables
    from analysis.runs import load_experiment

    arms = {"a": SyntheticArm(0.4, {"algo": "dqn"}), "b": SyntheticArm(0.6, {"algo": "dqn"})}
    envs = ["minatar_breakout", "minatar_asterix"]
    exp = write_experiment(tmp_path, "exp", arms, envs, [0, 1, 2], n_logs=4, eval_episodes=2)
    scores = score_tables(load_experiment(exp))
    assert set(scores.final.source) == set(scores.curves.source) == {EVAL_SOURCE}
    matrices, _, _ = aggregate.score_matrices(scores.final)
    iqm = aggregate.aggregate_metrics(matrices, reps=100).query("metric == 'IQM'").set_index("arm").value
    curve = aggregate.sample_efficiency(resample_curves(scores.curves, "normalised", grid_per=()), reps=100)
    last = curve.sort_values("env_steps").groupby("arm").tail(1).set_index("arm").iqm
    assert last.to_dict() == pytest.approx(iqm.to_dict())
    html = build_report(exp, reps=100).read_text()
    agg = {row[0]: row[1] for row in _rows(html, "aggregate-table")}
    for arm in arms:
        assert agg[arm].startswith(fmt(100 * iqm[arm]) + " [")  # percent, as the curve's axis
    final = _rows(html, "final-table")
    for row in final:
        mean = scores.final[(scores.final.arm == row[0]) & (scores.final.env == row[1])].normalised.mean()
        assert row[-1] == fmt(100 * mean)
    assert "DQN-normalised score (%) (mean)" in html and "aggregates&#39; IQM" in html

    # Runs that evaluated only at the end: the final score is still the evaluation, its curve one
    # point (no sample-efficiency curve), and the training returns appear as what they are.
    _eval_only_at_the_end(exp)
    html = build_report(exp, reps=100).read_text()
    assert 'id="fig-sample-efficiency"' not in html and "another quantity than the final score" in html
    assert 'alt="training returns per env"' in html


def _rows(html: str, table_id: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', html, re.S).group(1)
    return [re.findall(r"<td>(.*?)</td>", r, re.S) for r in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_no_verdict_from_scores_normalised_within_the_experiment(tmp_path):
    exp = write_experiment(tmp_path, "exp", ARMS, ["MyEnv-v0"], [0, 1, 2], n_logs=3, eval_episodes=2)
    html = build_report(exp, reps=100).read_text()
    assert '<section id="verdict">' in html and "No verdict: the scores are normalised within" in html
    assert 'id="verdict-table"' not in html and "smallest IQM" not in html
    assert "FALLBACK: min-max" in html and "--bounds FILE" in html
    bounds = tmp_path / "bounds.toml"
    bounds.write_text('[[env]]\nenv = "MyEnv-v0"\nscore_min = -21.0\nscore_max = 21.0\nscore_source = "t"\n')
    assert main(["build", str(exp), "--reps", "100", "--bounds", str(bounds)]) == 0
    html = (exp / "report.html").read_text()
    assert 'id="verdict-table"' in html and _rows(html, "bounds-table")[0][:2] == ["MyEnv-v0", "-21"]


def test_bad_bounds_file_is_one_line_exit_2(tmp_path, capsys):
    exp = write_experiment(tmp_path, "exp", ARMS, ["MyEnv-v0"], [0], n_logs=2)
    for name, text, why in [
        ("b.csv", "env,low\nMyEnv-v0,1\n", "missing columns ['score_min', 'score_max']"),
        ("c.csv", "env,score_min,score_max\nMyEnv-v0,5,5\n", "needs finite bounds low < high"),
        ("d.toml", "[[env]]\nenv = 'x'\n", "entry 1 lacks ['score_min', 'score_max']"),
        ("none.csv", None, "does not exist"),
    ]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        assert main(["build", str(exp), "--bounds", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err


def test_no_detectable_difference_of_zero_without_spread():
    import numpy as np

    from analysis.verdict import power_statement, two_arm_verdict

    same = {"a": np.zeros((3, 2)), "b": np.zeros((3, 2))}
    found = two_arm_verdict(same, "a", "b", reps=100)
    power = power_statement(found)
    assert found.winner is None and np.isnan(power.detectable)
    assert "cannot be estimated" in power.sentence and " 0:" not in power.sentence


def test_the_time_split_legend_is_clear_of_the_axis_labels():
    import pandas as pd

    from reports.figures import time_split_figure

    shares = {"share_sampling": 0.5, "share_optimizing": 0.3, "share_evaluating": 0.1, "share_logging": 0.1}
    fig = time_split_figure(pd.DataFrame([{"arm": f"arm{i}", **shares} for i in range(2)]))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    for label in (ax.xaxis.label, ax.yaxis.label, *ax.get_yticklabels(), *ax.get_xticklabels()):
        assert not legend.overlaps(label.get_window_extent(renderer)), label.get_text()
    assert ax.get_xlim() == (0, 100) and "(%)" in ax.get_xlabel()


@pytest.mark.parametrize("width", [0.0, 1e-12])
def test_an_interval_of_identical_scores_keeps_a_readable_axis(width):
    """The optimality gap of runs all cut at one cap came out [47.36, 47.36 + 1e-12]: the panel
    zoomed to 1e-12 and showed a filled box with no readable ticks, where an exactly equal interval
    got a few units of axis."""
    import matplotlib.pyplot as plt

    from reports.figures import _unstick

    fig, ax = plt.subplots()
    ax.barh(0, width, left=47.36, height=0.6)
    _unstick(ax)
    low, high = ax.get_xlim()
    assert low < 47.36 - 1 and high > 47.36 + 1
    plt.close(fig)


def test_keys_only_some_arms_record_are_listed_apart_from_the_differences(tmp_path):
    from analysis.runs import load_experiment
    from reports.setup_sections import config_section

    ours = {"algo": "ppo", "algo_config": {"clip_epsilon": 0.1, "lr": 1e-3}, "env": {"frame_stack": 4}}
    peer = {"algo": "sb3_ppo", "algo_config": {"clip_range": 0.1, "lr": 3e-4}, "env": {"frame_stack": 4}}
    arms = {"ours": SyntheticArm(1.0, ours), "peer": SyntheticArm(1.0, peer)}
    section = config_section(load_experiment(write_experiment(tmp_path, "exp", arms, ["pong"], [0, 1])))
    tables = {t.id: t for t in section.tables}
    assert tables["config-diff-table"].rows == [
        ["algo", "ppo", "sb3_ppo"],
        ["algo_config.lr", "0.001", "0.0003"],
    ]
    one_side = tables["config-one-side-table"]
    assert one_side.rows == [
        ["algo_config.clip_epsilon", "0.1", "(absent)"],
        ["algo_config.clip_range", "(absent)", "0.1"],
    ]
    assert one_side.folded and one_side.caption.startswith("2 keys some arms do not record")
    # Arms that record the same keys: one table, as before.
    same = {"a": SyntheticArm(1.0, ours), "b": SyntheticArm(1.0, {**ours, "algo": "a2c"})}
    section = config_section(load_experiment(write_experiment(tmp_path, "same", same, ["pong"], [0])))
    assert [t.id for t in section.tables] == ["config-diff-table"]
