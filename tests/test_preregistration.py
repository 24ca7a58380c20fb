"""An analysis fixed before the data (repro/preregister.py, analysis/preregistered.py,
analysis/confirmatory.py) and every verdict beside its games (analysis/robust.py), on synthetic
experiments with known effects.

Synthetic runs are written with the harness's own writer (analysis/synthetic.py), so each carries the
metadata a real run has: its first start time and the code's commit, which the labels are checked from.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cartpole_plan import GOOD_HEAD, PLAN
from scipy import stats

from algorithms.configs import ConfigError
from algorithms.rundir import RunDir, git_state, run_path
from algorithms.rundir import meta as run_meta
from analysis.confirmatory import endpoint_table
from analysis.preregistered import (
    EXPLORATORY,
    PRE,
    Reading,
    registration,
    result_label,
    run_label,
)
from analysis.robust import middle_half
from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import write_run
from protocol.registration import parse_section, read_record
from reports.build import build_report
from repro.cli import main as repro_main
from repro.preregister import freeze

REPO = Path(__file__).resolve().parents[1]
GAMES = ["minatar_asterix", "minatar_breakout", "minatar_freeway"]
BASE, CAND = "corrected", "published"


def _grid(root: Path, name: str, skills: dict[tuple[str, str], float], seeds: list[int]) -> Path:
    """Runs of every (arm, game) in ``skills`` on ``seeds``, each at its own skill (a per-game effect)."""
    for (arm, env), skill in skills.items():
        for seed in seeds:
            write_run(
                run_path(root, name, arm, env, seed), config={"algo": arm, "env": {"id": env}},
                skill=skill, env=env, seed=seed, n_steps=250_000, frameskip=1, noise=0.02,
                stream=[len(arm), GAMES.index(env), seed],
            )  # fmt: skip
    (root / name / "plan.json").write_text(json.dumps({"arms": [CAND, BASE], "plans": []}))
    return root / name


def _section(**changes) -> dict:
    raw = {
        "alpha": 0.05,
        "correction": "holm",
        "seeds": "0-3",
        "replication_seeds": "100-103",
        "endpoints": [
            {"name": "breakout", "kind": "game", "game": "minatar_breakout", "baseline": BASE,
             "candidate": CAND, "test": "mann_whitney", "sides": "less"},
            {"name": "iqm", "kind": "aggregate", "metric": "iqm", "baseline": BASE, "candidate": CAND,
             "sides": "two"},
        ],
    }  # fmt: skip
    return {**raw, **changes}


def _parsed(raw: dict):
    return parse_section(raw, "plan.toml", [BASE, CAND], GAMES)


# A per-game effect on Breakout alone: the published arm is lower there, equal elsewhere.
ONE_GAME = {
    **{(arm, env): level for arm in (BASE, CAND) for env, level in zip(GAMES, (0.1, 0.5, 0.9))},
    (CAND, "minatar_breakout"): 0.3,
}


def test_one_game_carrying_the_aggregate_is_named_in_the_verdict_s_first_sentence(tmp_path):
    exp = _grid(tmp_path, "one", ONE_GAME, list(range(8)))
    study = run_study(exp, baseline=CAND, reps=500)
    assert study.verdict.winner == BASE
    assert study.robustness.carried_by == ("minatar_breakout",)
    assert study.verdict.sentence.startswith("One game carries this verdict: without minatar_breakout")
    games = study.robustness.games.set_index("env")
    assert (
        games.p_adjusted["minatar_breakout"]
        < 0.05
        < games.p_adjusted[["minatar_asterix", "minatar_freeway"]].min()
    )
    loo = study.robustness.leave_one_out.set_index("left_out")
    assert loo.winner["minatar_breakout"] is None and loo.winner["minatar_asterix"] == BASE
    text = study_markdown(study, "cmd", "today")
    assert "## The verdict across games" in text and "Leaving out minatar_breakout (one at a time)" in text
    assert "**Exploratory.** No [analysis] section was frozen before these runs" in text


def test_the_iqm_middle_half_is_the_trimmed_mean_s():
    # 8 values 0-3 and 10-13, 2 trimmed a side: the middle half is 2, 3, 10, 11
    matrix = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0], [3.0, 13.0]])
    mask = middle_half(matrix)
    assert np.isclose(matrix[mask].mean(), stats.trim_mean(matrix.ravel(), 0.25)) and mask.sum() == 4
    assert mask[:, 0].tolist() == [False, False, True, True]
    assert mask[:, 1].tolist() == [True, True, False, False]


def test_a_failed_replication_is_reported_apart_and_never_pooled(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text("")
    exp = tmp_path / "rep"
    freeze(exp, plan, _parsed(_section()), [0, 1, 2, 3, 100, 101, 102, 103], allow_dirty=True, code_dir=REPO)
    _grid(tmp_path, "rep", ONE_GAME, [0, 1, 2, 3])
    _grid(tmp_path, "rep", {key: 0.5 for key in ONE_GAME}, [100, 101, 102, 103])  # no effect on fresh seeds
    study = run_study(exp, baseline=CAND, reps=500)
    table = study.endpoints.set_index(["endpoint", "seed_set"])
    assert set(table.index.get_level_values("seed_set")) == {"confirmatory", "replication"}  # pool = false
    first, again = table.loc[("breakout", "confirmatory")], table.loc[("breakout", "replication")]
    assert first.holds and first.label == PRE and first.seeds == "0-3" and first.runs == 8
    assert np.isclose(first.p, 1 / 70)  # exact one-sided Mann-Whitney: 4 runs all below 4 others
    assert not again.holds and again.label == PRE and again.seeds == "100-103"
    assert (table.correction == "holm").all() and (table.p_adjusted >= table.p).all()
    text = study_markdown(study, "cmd", "today")
    assert "## Analysis fixed before the data" in text and "| breakout | replication | 100-103 |" in text
    assert "never pooled with" in text and "pooled |" not in text
    assert read_record(exp)[0]["plan"] == str(plan.resolve())  # outside the repository: absolute
    html = build_report(exp, tmp_path / "report.html", reps=200, baseline=CAND).read_text()
    assert "Analysis fixed before the data" in html and 'id="analysis-endpoints"' in html
    assert html.index("Analysis fixed before the data") < html.index("Verdict (")


def test_only_a_frozen_endpoint_read_as_frozen_is_pre_registered(tmp_path):
    exp = tmp_path / "label"
    freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0, 1, 2, 3], allow_dirty=True, code_dir=REPO)
    _grid(tmp_path, "label", ONE_GAME, [0, 1, 2, 3])
    study = run_study(exp, baseline=CAND, reps=300)
    assert (study.endpoints.label == PRE).all()  # the frozen endpoints, read as frozen
    # The IQM verdict of the very same runs is no frozen endpoint, though every run passed the freeze.
    assert study.label == (EXPLORATORY, "not a frozen endpoint")
    reg, metadata = study.registration, study.experiment.metadata
    runs = metadata[["arm", "env", "seed"]]
    frozen = Reading("iqm", "bootstrap", "two", "holm", ("breakout", "iqm"))
    assert result_label(reg, frozen, runs, metadata)[0] == PRE
    for changed, what in (
        ({"correction": "bonferroni"}, "correction"), ({"sides": "less"}, "sides"),
        ({"family": ("iqm",)}, "family"), ({"endpoint": "median"}, None),
    ):  # fmt: skip
        label, why = result_label(reg, Reading(**{**frozen.__dict__, **changed}), runs, metadata)
        assert label == EXPLORATORY and why.startswith("not a frozen endpoint")
        assert what is None or f"another {what} than the frozen one" in why
    text = study_markdown(study, "cmd", "today")
    assert f"**Verdict ({EXPLORATORY}).**" in text
    assert "Every result below this table is **exploratory** (not a frozen endpoint)." in text
    html = build_report(exp, tmp_path / "report.html", reps=200, baseline=CAND).read_text()
    assert "Verdict (exploratory)" in html and "exploratory: not a frozen endpoint" in html


def _resume(run_dir: Path) -> None:
    """Start the (complete) run at ``run_dir`` again as a resume does: its later start is recorded."""
    run = RunDir.open(run_dir, json.loads((run_dir / "config.json").read_text()), {"seed": 0})
    run.note_resume(125_000)
    run.set_status("complete")
    run.close()


def test_a_frozen_run_resumed_from_another_commit_is_exploratory(tmp_path, monkeypatch):
    exp = tmp_path / "resumed"
    freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0, 1], allow_dirty=True, code_dir=REPO)
    _grid(tmp_path, "resumed", ONE_GAME, [0, 1])
    _resume(run_path(tmp_path, "resumed", CAND, "minatar_breakout", 0))  # from the frozen commit
    study = run_study(exp, baseline=CAND, reps=200)
    metadata = study.experiment.metadata
    runs = metadata[["arm", "env", "seed"]]
    assert run_label(study.registration, runs, metadata)[0] == PRE
    monkeypatch.setattr(run_meta, "git_state", lambda code_dir=None: ("0" * 40, False))
    _resume(run_path(tmp_path, "resumed", BASE, "minatar_freeway", 1))
    study = run_study(exp, baseline=CAND, reps=200)
    metadata = study.experiment.metadata
    label, why = run_label(study.registration, metadata[["arm", "env", "seed"]], metadata)
    assert (label, why) == (EXPLORATORY, "1 of 12 runs: resumed from another commit than the frozen one")
    # The Breakout endpoint reads no Freeway run; the aggregate reads them all.
    assert study.endpoints.set_index("endpoint").label.to_dict() == {"breakout": PRE, "iqm": EXPLORATORY}


def test_a_frozen_section_that_allows_pooling_gets_a_pooled_row(tmp_path):
    exp = tmp_path / "pool"
    freeze(exp, tmp_path / "p.toml", _parsed(_section(pool=True)), [0, 100], allow_dirty=True, code_dir=REPO)
    _grid(tmp_path, "pool", ONE_GAME, [0, 1, 100, 101])
    table = run_study(exp, baseline=CAND, reps=300).endpoints
    assert table[table.seed_set == "pooled"].seeds.tolist() == ["0,1,100,101"] * 2


def test_a_section_changed_after_runs_started_is_said_on_top(tmp_path):
    plan = tmp_path / "plan.toml"
    exp = tmp_path / "changed"
    freeze(exp, plan, _parsed(_section()), [0], allow_dirty=True, code_dir=REPO)
    _grid(tmp_path, "changed", ONE_GAME, [0, 1])
    after = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    changed = _parsed(_section(correction="none"))
    later = freeze(exp, plan, changed, [0], allow_dirty=True, code_dir=REPO, now=after)
    assert len(later.added) == 1 and len(read_record(exp)) == 2
    reg = registration(exp, run_study(exp, reps=200).experiment.metadata)
    assert reg.section.correction == "holm"  # the first freeze is the one results use
    text = study_markdown(run_study(exp, baseline=CAND, reps=200), "cmd", "today")
    top = text[: text.index("## Analysis fixed before the data")]
    assert "**Changed after runs existed:" in top and "when 12 run(s) had already started" in top


def test_seeds_added_after_a_look_and_runs_before_the_freeze_are_exploratory(tmp_path):
    exp = _grid(tmp_path, "late", ONE_GAME, [0, 1])
    metadata = run_study(exp, reps=200).experiment.metadata
    freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0, 1], allow_dirty=True, code_dir=REPO)
    reg = registration(exp, metadata)
    runs = metadata[["arm", "env", "seed"]]
    assert run_label(reg, runs, metadata) == (EXPLORATORY, "12 of 12 runs: started before the freeze")
    _grid(tmp_path, "late", ONE_GAME, [7])  # a seed no frozen set names, added after a look
    study = run_study(exp, baseline=CAND, reps=200)
    metadata = study.experiment.metadata
    label, why = run_label(study.registration, metadata[["arm", "env", "seed"]], metadata)
    assert label == EXPLORATORY and "6 of 18 runs: seeds outside the frozen seed sets" in why
    assert "12 of 18 runs: started before the freeze" in why
    assert f"**Verdict ({EXPLORATORY}).**" in study_markdown(study, "cmd", "today")


def test_no_freeze_means_every_result_is_exploratory(tmp_path):
    exp = _grid(tmp_path, "none", ONE_GAME, [0, 1])
    study = run_study(exp, reps=200)
    assert study.endpoints.empty and study.label[0] == EXPLORATORY
    assert endpoint_table(registration(exp, study.experiment.metadata), pd.DataFrame(), pd.DataFrame()).empty


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_dirty_tree_is_refused_unless_allowed_and_then_recorded(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    _git(code, "init", "-q")
    (code / "train.py").write_text("a = 1\n")
    _git(code, "add", "train.py")
    _git(code, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "c")
    (code / "train.py").write_text("a = 2\n")
    exp = tmp_path / "exp"
    with pytest.raises(ConfigError, match="uncommitted changes; commit them .* or pass --allow-dirty"):
        freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0], allow_dirty=False, code_dir=code)
    assert not exp.exists()  # nothing written
    done = freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0], allow_dirty=True, code_dir=code)
    (entry,) = read_record(exp)
    assert entry["dirty"] is True and entry["commit"] == git_state(code)[0] and done.added == (entry,)
    assert "(dirty tree)" in done.line
    again = freeze(exp, tmp_path / "p.toml", _parsed(_section()), [0, 1], allow_dirty=True, code_dir=code)
    assert again.added == () and "already frozen" in again.line  # the same section: nothing new
    reg = registration(exp, pd.DataFrame())
    assert any("--allow-dirty" in note for note in reg.notes)


@pytest.mark.parametrize(
    ("head", "endpoint", "message"),
    [
        (
            GOOD_HEAD,
            'test = "sign"',
            "endpoint 1 'test' (kind game): 'sign' is not one of mann_whitney, welch",
        ),
        (GOOD_HEAD, 'metric = "iqm"', "endpoint 1 'metric': not a key of a 'game' endpoint"),
        ('correction = "sidak"', "", "'correction': 'sidak' is not one of holm, bonferroni, bh, none"),
        (GOOD_HEAD + '\nreplication_seeds = "1-3"', "", "'replication_seeds': seeds 1 are also in 'seeds'"),
        (GOOD_HEAD + "\ncolour = 1", "", "[analysis]: unknown key 'colour'"),
        ("", "", "[analysis]: missing required key 'correction'"),
    ],
)
def test_a_bad_analysis_section_is_one_line_and_exit_2_with_nothing_written(
    tmp_path, capsys, head, endpoint, message
):
    path = tmp_path / "bad.toml"
    path.write_text(PLAN.format(head=head, endpoint=endpoint))
    root = tmp_path / "runs"
    code = repro_main(
        ["run", str(path), "--seeds", "0-0", "--profile", "smoke", "--root", str(root), "--dry-run"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert str(path) in err and message in err
    assert not root.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"game": "minatar_pong"}, "'game': 'minatar_pong' is not an env of the plan"),
        (
            {"metric": "mode", "kind": "aggregate", "game": None, "test": None},
            "'metric': 'mode' is not one of iqm",
        ),
        ({"baseline": "other"}, "'baseline': 'other' is not an arm of the plan"),
        ({"sides": "up"}, "'sides': 'up' is not one of two, greater, less"),
        ({"kind": "effect", "switch": "x"}, "an effect endpoint needs a factorial design"),
    ],
)
def test_endpoints_name_the_plan_s_own_games_arms_tests_and_sides(change, message):
    endpoint = {**_section()["endpoints"][0], **change}
    endpoint = {k: v for k, v in endpoint.items() if v is not None}
    if endpoint["kind"] == "effect":
        endpoint = {k: v for k, v in endpoint.items() if k in ("kind", "switch", "sides", "name")}
    with pytest.raises(ConfigError, match="plan.toml \\[analysis\\] endpoint 1") as found:
        _parsed(_section(endpoints=[endpoint]))
    assert message in str(found.value)


def test_the_dry_run_says_which_seed_sets_freeze(tmp_path, capsys):
    path = tmp_path / "good.toml"
    path.write_text(PLAN.format(head=GOOD_HEAD, endpoint=""))
    root = tmp_path / "runs"
    args = ["run", str(path), "--profile", "smoke", "--root", str(root), "--dry-run", "--no-estimate"]
    args.append("--allow-dirty")  # a dirty tree refuses the dry run as it refuses the run
    assert repro_main([*args, "--seeds", "0-2"]) == 0
    out = capsys.readouterr().out
    assert repro_main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "analysis: " in shown and "holm across 1 endpoints, seeds 0,1" in shown
    assert (
        "  game_CartPole-v1: ppo_cartpole_zoo - dqn_cartpole on CartPole-v1; mann_whitney, greater" in shown
    )
    assert "confirmatory seeds 0,1 (freezes before its first job); seeds 2 in neither set: exploratory" in out
    assert not root.exists()


def _change_section() -> dict:
    """Two primary game endpoints and a secondary change endpoint on Breakout's gap over training."""
    game = {"kind": "game", "game": "minatar_breakout", "baseline": BASE, "candidate": CAND, "test": "welch",
            "sides": "less"}  # fmt: skip
    return {
        "alpha": 0.05, "correction": "holm", "seeds": "0-3",
        "endpoints": [
            {**game, "name": "breakout"},
            {**game, "name": "asterix", "game": "minatar_asterix"},
            {"name": "gap_change", "kind": "change", "game": "minatar_breakout", "baseline": BASE,
             "candidate": CAND, "from_steps": 100_000, "to_steps": 250_000, "sides": "two",
             "secondary": True},
        ],
    }  # fmt: skip


def test_a_secondary_change_endpoint_reads_the_gap_over_training_outside_the_family(tmp_path):
    exp = tmp_path / "change"
    freeze(
        exp, tmp_path / "p.toml", _parsed(_change_section()), [0, 1, 2, 3], allow_dirty=True, code_dir=REPO
    )
    _grid(tmp_path, "change", ONE_GAME, [0, 1, 2, 3])  # the published arm learns less on Breakout
    table = run_study(exp, baseline=CAND, reps=200).endpoints.set_index("endpoint")
    change = table.loc["gap_change"]
    # each run's evaluation at 250k less its own at 100k, published minus corrected, by hand
    curves = run_study(exp, baseline=CAND, reps=200).scores.curves
    on = curves[curves.env == "minatar_breakout"].pivot_table(
        index=["arm", "seed"], columns="env_steps", values="score"
    )
    by_arm = (on[250_000] - on[100_000]).groupby(level="arm")
    assert np.isclose(change.estimate, by_arm.mean()[CAND] - by_arm.mean()[BASE])
    assert change.estimate < 0 and change.p_adjusted == change.p and change.correction == "none"
    assert change.result.startswith("the gap grows (gap -") and change.label == PRE, change.why
    primary = table.loc[["breakout", "asterix"]]
    assert np.allclose(primary.p_adjusted.sort_values().iloc[0], 2 * primary.p.min())  # Holm over 2, not 3
    eval_csv = run_path(tmp_path, "change", CAND, "minatar_breakout", 1) / "eval.csv"
    kept = [line for line in eval_csv.read_text().splitlines() if not line.startswith("100000,")]
    eval_csv.write_text("\n".join(kept) + "\n")
    again = run_study(exp, baseline=CAND, reps=200).endpoints.set_index("endpoint").loc["gap_change"]
    assert again.result == "not tested: 1 run(s) lack an evaluation at 100,000 or 250,000 env steps"


def test_a_change_endpoint_needs_two_steps_in_order():
    bad = _change_section()
    bad["endpoints"][2] = {**bad["endpoints"][2], "from_steps": 250_000}
    with pytest.raises(
        ConfigError, match="'to_steps': expected 0 < from_steps < to_steps, got 250000 and 250000"
    ):
        _parsed(bad)
