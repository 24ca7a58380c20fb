"""Runs resumed from a checkpoint are said, with where (analysis/interruptions.py): read from each
run's metadata.json record of its later starts, or, for runs written before it, from the attempt
headers and the resume line of its log.txt."""

from __future__ import annotations

import json

from algorithms.rundir import RunDir
from algorithms.rundir import meta as run_meta
from analysis.study import run_study
from analysis.study_markdown import study_markdown
from analysis.synthetic import SyntheticArm, write_experiment
from reports.build import build_report

HEADER = "=== attempt 1 on cpu{slot} at 2026-12-06T0{hour}:00:00+00:00: python -m repro run-job\n"
STOPPED = "interrupted: stopped; status.json says interrupted (rerun to continue)\n"


def test_resumed_runs_are_listed_with_where_they_resumed(tmp_path):
    arms = {arm: SyntheticArm(1.0, {"algo": arm}) for arm in ("a", "b")}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1], n_logs=3, frameskip=1)
    resumed = exp / "a" / "CartPole-v1" / "seed0" / "log.txt"
    where = "runs/exp/a/CartPole-v1/seed0: resumed from its checkpoint at 1,200 env steps\n"
    resumed.write_text(HEADER.format(slot=0, hour=5) + STOPPED + HEADER.format(slot=1, hour=6) + where)
    before = exp / "b" / "CartPole-v1" / "seed1" / "log.txt"  # a log from before the resume line
    before.write_text(HEADER.format(slot=0, hour=5) + "interrupted\n" + HEADER.format(slot=0, hour=7))
    once = exp / "b" / "CartPole-v1" / "seed0" / "log.txt"
    once.write_text(HEADER.format(slot=0, hour=5))  # one attempt: not resumed
    study = run_study(exp, reps=100)
    table = study.resumed.set_index(["arm", "seed"])
    assert sorted(table.index) == [("a", 0), ("b", 1)]
    assert table.resumed_at[("a", 0)] == "1,200" and table.attempts[("a", 0)] == 2
    assert table.resumed_at[("b", 1)] == "not recorded"
    assert table.started[("a", 0)] == "2026-12-06T05:00:00+00:00, 2026-12-06T06:00:00+00:00"
    page = study_markdown(study, "cmd", "today")
    section = page[page.index("## Runs resumed from a checkpoint") : page.index("## Runs not used")]
    assert "- a/CartPole-v1/seed0: 2 attempts" in section and "resumed at 1,200 env steps" in section
    assert "- b/CartPole-v1/seed1: 2 attempts" in section and "where: not recorded" in section
    assert "seed0: 1 attempt" not in section


def test_a_study_without_resumed_runs_has_no_such_section(tmp_path):
    arms = {"a": SyntheticArm(1.0, {"algo": "a"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0], n_logs=3, frameskip=1)
    study = run_study(exp, reps=100)
    assert study.resumed.empty and "## Runs resumed" not in study_markdown(study, "cmd", "today")


def test_a_run_resumed_on_another_cpu_is_listed_with_each_start_s_cpu(tmp_path, monkeypatch):
    """In the study's list of resumed runs, and in the report's hardware table, which lists every
    start's CPU (it listed the first start's only)."""
    arms = {"a": SyntheticArm(1.0, {"algo": "a"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1], n_logs=3, frameskip=1)
    path = exp / "a" / "CartPole-v1" / "seed0"
    for steps, cpu in ((400, "Test CPU B"), (800, "Test CPU B")):
        monkeypatch.setattr(run_meta, "_cpu_model", lambda cpu=cpu: cpu)
        run = RunDir.open(path, json.loads((path / "config.json").read_text()), {"seed": 0})
        run.note_resume(steps)
        run.set_status("complete")
        run.close()
    first = json.loads((path / "metadata.json").read_text())["cpu_model"]
    study = run_study(exp, reps=100)
    (row,) = study.resumed.itertuples()
    assert (row.seed, row.attempts, row.resumed_at) == (0, 3, "400, 800")
    assert row.hosts == f"{first}, Test CPU B, Test CPU B" and len(row.started.split(", ")) == 3
    page = study_markdown(study, "cmd", "today")
    assert f"resumed at 400, 800 env steps; on more than one CPU, start by start: {first}, Test CPU B" in page
    html = build_report(exp, tmp_path / "r.html", reps=100).read_text()
    hardware = html[html.index('id="hardware"') :]
    assert "Test CPU B" in hardware[: hardware.index("</table>")]
    assert "2 later start(s) of 1 run(s) (metadata.json)" in hardware
