"""A freeze record checked on every read (protocol/freeze_check.py, analysis/preregistered.py): a record
edited after its freeze, one that cannot be checked, a reading with changed analysis code, a score
source other than the frozen one and an endpoint without runs are never read as pre-registered.

Each experiment is frozen from a throwaway git checkout holding the plan, as `run` freezes one; its
synthetic runs record that checkout's commit, as runs made from it would."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.configs import ConfigError
from algorithms.rundir import run_path
from analysis.preregistered import EXPLORATORY, PRE
from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import write_run
from protocol import freeze_check
from protocol.files import read_toml
from protocol.registration import RECORD_FILE, parse_section, section_hash
from reports.build import build_report
from repro.preregister import freeze

GAME, BASE, CAND = "minatar_breakout", "corrected", "published"
SECTION = """
[analysis]
alpha = 0.05
correction = "holm"
seeds = "0-3"

[[analysis.endpoints]]
name = "breakout"
kind = "game"
game = "minatar_breakout"
baseline = "corrected"
candidate = "published"
test = "welch"
sides = "less"
"""
GIT_USER = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *GIT_USER, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _checkout(tmp_path: Path) -> tuple[Path, str]:
    """A git checkout whose one commit holds the plan (its ``[analysis]`` section)."""
    repo = tmp_path / "code"
    repo.mkdir()
    (repo / "plan.toml").write_text(SECTION)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "plan")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


def _section(plan: Path, arms=(BASE, CAND)):
    return parse_section(read_toml(plan)["analysis"], str(plan), list(arms), [GAME])


def _runs(exp: Path, commit: str) -> None:
    """Four seeds an arm, the candidate clearly lower; each run's metadata names ``commit``."""
    for arm, skill in ((BASE, 0.8), (CAND, 0.4)):
        for seed in range(4):
            path = run_path(exp.parent, exp.name, arm, GAME, seed)
            write_run(path, config={"algo": arm, "env": {"id": GAME}}, skill=skill, env=GAME, seed=seed,
                      n_steps=250_000, frameskip=1, noise=0.02, stream=[len(arm), seed])  # fmt: skip
            meta = json.loads((path / "metadata.json").read_text())
            (path / "metadata.json").write_text(
                json.dumps({**meta, "git_commit": commit, "git_dirty": False})
            )
    (exp / "plan.json").write_text(json.dumps({"arms": [CAND, BASE], "plans": []}))


def _frozen(tmp_path: Path) -> tuple[Path, Path, str]:
    repo, commit = _checkout(tmp_path)
    exp = tmp_path / "runs" / "exp"
    freeze(exp, repo / "plan.toml", _section(repo / "plan.toml"), range(4), allow_dirty=False, code_dir=repo)
    _runs(exp, commit)
    return exp, repo, commit


def _endpoint(exp: Path):
    study = run_study(exp, baseline=CAND, reps=200)
    return study, study.endpoints.iloc[0]


def _edit(exp: Path, change) -> None:
    path = exp / RECORD_FILE
    record = json.loads(path.read_text())
    change(record["freezes"][0])
    path.write_text(json.dumps(record))


def test_a_freeze_read_as_frozen_is_pre_registered_and_says_when_and_with_what_code(tmp_path):
    exp, _, commit = _frozen(tmp_path)
    study, row = _endpoint(exp)
    assert row.label == PRE and row.result == "holds", row.why
    assert study.registration.check.sound
    text = study_markdown(study, "cmd", "today")
    assert f"The analysis code reading these runs is the frozen code (commit {commit[:12]})" in text
    assert "min before the first run started" in text and "freeze record" not in text.lower()


def _alpha(e):
    e["section"]["alpha"] = 0.5


def _alpha_rehashed(e):
    _alpha(e)
    e["hash"] = section_hash(e["section"])


def _unknown_arm(e):
    e["section"]["endpoints"][0]["candidate"] = "no_such_arm"
    e["hash"] = section_hash(e["section"])


def _earlier(e):
    e["frozen_at"] = "2001-01-01T00:00:00+00:00"


def _unknown_commit(e):
    e["commit"] = "0" * 40


@pytest.mark.parametrize(
    "change, said",
    [
        (
            _alpha,
            "freeze record altered: the confirmatory freeze's section does not hash to its recorded hash",
        ),
        (
            _alpha_rehashed,
            "freeze record altered: the confirmatory freeze's section is not the one committed",
        ),
        (_unknown_arm, "freeze record altered: the confirmatory freeze's section is not the one committed"),
        (
            _earlier,
            "freeze record altered: the confirmatory freeze's time 2001-01-01T00:00:00+00:00 precedes",
        ),
        (
            _unknown_commit,
            "freeze record unverified: the confirmatory freeze's commit 000000000000 is not in",
        ),
    ],
)
def test_a_hand_edited_freeze_record_is_said_on_top_and_labels_nothing_pre_registered(tmp_path, change, said):
    exp, _, _ = _frozen(tmp_path)
    _edit(exp, change)
    study, row = _endpoint(exp)
    assert row.label == EXPLORATORY and row.why.startswith(said), row.why
    assert study.label[0] == EXPLORATORY
    text = study_markdown(study, "cmd", "today")
    top = text[: text.index("## Analysis fixed before the data")]
    assert f"**{said[0].upper()}{said[1:]}" in top and "nothing here is pre-registered" in top
    assert "| pre-registered" not in text


def test_the_report_says_an_altered_record_above_its_endpoints(tmp_path):
    exp, _, _ = _frozen(tmp_path)
    _edit(exp, _alpha)
    html = build_report(exp, tmp_path / "report.html", reps=200, baseline=CAND).read_text()
    said = "Freeze record altered: the confirmatory freeze&#39;s section does not hash"
    assert said in html and html.index(said) < html.index('id="analysis-endpoints"')


def test_a_committed_record_edited_afterwards_is_altered(tmp_path):
    exp, _, _ = _frozen(tmp_path)
    _git(exp, "init", "-q")
    _git(exp, "add", RECORD_FILE)
    _git(exp, "commit", "-qm", "freeze")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)  # still after the commit: only history tells
    _edit(exp, lambda e: e.update(frozen_at=later.isoformat()))
    _, row = _endpoint(exp)
    assert row.label == EXPLORATORY and "differs from its version committed at" in row.why, row.why


def test_a_reading_with_changed_analysis_code_is_exploratory_and_says_how_to_read_as_frozen(
    tmp_path, monkeypatch
):
    exp, _, commit = _frozen(tmp_path)
    now = freeze_check.code_fingerprint()
    monkeypatch.setattr(
        freeze_check, "code_fingerprint", lambda root=None: {**now, "analysis/confirmatory.py": "0" * 40}
    )
    study, row = _endpoint(exp)
    assert row.label == EXPLORATORY
    assert row.why == "analysis code changed since the freeze (analysis/confirmatory.py)"
    text = study_markdown(study, "cmd", "today")
    top = text[: text.index("## Analysis fixed before the data")]
    assert (
        "**The reading is not the frozen one" in top
        and f"this command and --as-frozen, which runs it with the code of commit {commit[:12]}" in top
        and f"git worktree add --detach ../frozen-{commit[:12]}" in top
    )


def test_an_old_record_without_a_code_fingerprint_and_a_foreign_commit_is_not_read_as_frozen(tmp_path):
    exp, _, _ = _frozen(tmp_path)
    _edit(exp, lambda e: e.pop("analysis_code"))
    _, row = _endpoint(exp)
    assert row.label == EXPLORATORY and "the frozen analysis code is unknown here" in row.why


def test_freeze_refuses_a_section_that_is_not_committed_unless_allowed_and_then_records_it_dirty(tmp_path):
    repo, _ = _checkout(tmp_path)
    plan = repo / "new_plan.toml"  # untracked: git status (untracked files left out) calls the tree clean
    plan.write_text(SECTION.replace('sides = "less"', 'sides = "two"'))
    exp = tmp_path / "runs" / "exp"
    with pytest.raises(ConfigError, match="new_plan.toml \\[analysis\\]: this section is not committed at"):
        freeze(exp, plan, _section(plan), range(4), allow_dirty=False, code_dir=repo)
    assert not exp.exists()
    freeze(exp, plan, _section(plan), range(4), allow_dirty=True, code_dir=repo)
    assert json.loads((exp / RECORD_FILE).read_text())["freezes"][0]["dirty"] is True


def test_a_switch_of_score_source_is_said_on_top_and_leaves_the_frozen_endpoint_untested(tmp_path):
    exp, _, _ = _frozen(tmp_path)
    eval_csv = run_path(exp.parent, exp.name, BASE, GAME, 2) / "eval.csv"
    eval_csv.write_text(eval_csv.read_text().splitlines()[0] + "\n")  # its header only: no evaluation
    study, row = _endpoint(exp)
    assert row.result.startswith("not tested: its frozen score is the final evaluation, and 1 complete run")
    assert row.label == EXPLORATORY and f"{BASE}/{GAME}/seed2" in row.why
    text = study_markdown(study, "cmd", "today")
    assert "**Score source: every score on this page is a training return" in text.split("## ")[0]


def test_an_endpoint_naming_an_arm_without_runs_is_not_tested_never_not_shown(tmp_path):
    repo, commit = _checkout(tmp_path)
    plan = repo / "plan.toml"
    plan.write_text(SECTION.replace('candidate = "published"', 'candidate = "ghost"'))
    exp = tmp_path / "runs" / "exp"
    freeze(exp, plan, _section(plan, (BASE, CAND, "ghost")), range(4), allow_dirty=True, code_dir=repo)
    _runs(exp, commit)
    _, row = _endpoint(exp)
    assert row.result == "not tested: arm 'ghost' has 0 run(s) on minatar_breakout"
    assert row.label == EXPLORATORY and row.why == row.result


def test_a_fifo_in_place_of_the_freeze_record_is_refused_in_one_line_never_read(tmp_path):
    exp, _, _ = _frozen(tmp_path)
    record = exp / RECORD_FILE
    record.unlink()
    os.mkfifo(record)
    done = subprocess.run(
        [sys.executable, "-m", "analysis", "study", str(exp), "--reps", "200"],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{record} is a FIFO, not a regular file: refused unread" in done.stderr
