"""Damaged run files read: reading (summary, study, report) never crashes on runs without rows or
with garbage in them; a return that is not a finite number is never a score; a run file that is
not a regular file is refused unread; a report or study written to a full disk or a read-only
directory is whole or nothing, in one line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from run_damage_helpers import REPO, as_user, write_run
from special_files import not_a_file

from algorithms.rundir import EVAL_COLUMNS, read_run
from analysis.__main__ import main as analysis_main
from analysis.synthetic import SyntheticArm, write_experiment
from reports.__main__ import main as reports_main
from repro.cli import main as repro_main

# --- reading an experiment with no rows yet, or garbage in its runs -------------------------------------
EVAL_HEADER = b"env_steps,frames,updates,wall_time_s,episode,return,length\n"
GARBAGE = {
    "progress_random_bytes": {"progress.csv": bytes(range(256)) * 2},
    "progress_header_only": {"progress.csv": b"env_steps,frames,return_mean\n"},
    "progress_text": {"progress.csv": b"env_steps,frames,return_mean\n100,100,abc\n200,200,x\n"},
    "progress_without_env_steps": {"progress.csv": b"frames,return_mean\n100,1\n"},
    "progress_short_row_inside": {"progress.csv": b"env_steps,frames,return_mean\n100,100\n200,200,1\n"},
    "eval_text": {
        "eval.csv": b"env_steps,frames,updates,wall_time_s,episode,return,length\n200,200,1,1,0,abc,3\n"
    },  # fmt: skip
    "eval_one_column": {"eval.csv": b"env_steps\n200\n"},
    "eval_random_bytes": {"eval.csv": bytes(range(255, -1, -1))},
    "config_list": {"config.json": b"[]"},
    "metadata_bytes": {"metadata.json": b"\xff\xfe\x00"},
    "status_list": {"status.json": b"[]"},
    "status_bytes": {"status.json": b"\x8f\xff"},
    # Returns that are not finite numbers (issue 57, item 5): before, a nan gave "P = nan [nan, nan]"
    # and an inf an infinite IQM with 30 lines of warnings. A NaN training return is damage only in a
    # row that logged episodes (with none, the logger writes NaN by design).
    "eval_nan": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,nan,3\n"},
    "eval_inf": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,inf,3\n"},
    "eval_minus_inf": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,-inf,3\n"},
    "eval_return_empty": {"eval.csv": EVAL_HEADER + b"200,200,1,1,0,,3\n"},
    "progress_inf": {"progress.csv": b"env_steps,frames,return_mean\n100,100,1.0\n200,200,inf\n"},
    "progress_nan_after_episodes": {
        "progress.csv": b"env_steps,frames,return_mean,episodes_logged\n100,100,nan,0\n200,200,nan,2\n"
    },
    "plan_bytes": {"../../../plan.json": b"\xff\xfe{"},
    "plan_list": {"../../../plan.json": b'["a"]'},
}


def read_everything(exp: Path, tmp_path: Path, capsys) -> dict[str, tuple[int, str, str]]:
    """Exit code, stdout and stderr of the summary, the study and the report of ``exp``."""
    found, report = {}, str(tmp_path / "r.html")
    for name, call in (
        ("summary", lambda: repro_main(["summary", str(exp)])),
        ("study", lambda: analysis_main(["study", str(exp), "--reps", "100"])),
        ("report", lambda: reports_main(["build", str(exp), "--reps", "100", "--out", report])),
    ):
        code = call()
        out, err = capsys.readouterr()
        found[name] = (code, out, err)
    return found


def test_reports_and_study_of_runs_without_rows_say_what_is_missing(tmp_path, capsys):
    exp = tmp_path / "exp"
    for seed in (0, 1):  # jobs just started: config, metadata, status running, no row yet
        write_run(tmp_path, "exp", seed, rows_=0)
    found = read_everything(exp, tmp_path, capsys)
    assert all(code == 0 for code, _, _ in found.values()), found
    study = found["study"][1]
    assert "from 0 complete runs" in study and "no complete run has a score yet" in study
    assert study.count("progress.csv missing") == 2
    assert "progress.csv missing" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_in_a_run_is_listed_not_a_crash(tmp_path, capsys, kind):
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    bad = write_run(tmp_path, "exp", 1)
    for name, data in GARBAGE[kind].items():
        path = bad / name
        if path.parent.is_file():  # a directory where a run file belongs
            path.parent.unlink()
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    found = read_everything(exp, tmp_path, capsys)
    for name, (code, _, err) in found.items():
        assert code == 0 and err == "", (name, err)
    study = found["study"][1]
    if kind.startswith("plan"):  # the runs are fine; the plan file is named with what is wrong
        assert (
            f"Plan file unusable (expected runs and arm order not taken from it): {exp / 'plan.json'}"
            in study
        )
        assert "from 2 complete runs" in study
    else:  # the damaged run is left out and listed with why
        assert "from 1 complete runs" in study
        assert "arm/minatar_breakout/seed1: " in study.split("## Runs not used")[1]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_return_is_never_a_score(tmp_path, capsys, value):
    """Both episodes of one run's last evaluation returned ``value``: before, the verdict read "b - a =
    +nan [+nan, +nan]" with "P(b > a) = nan" (inf: an IQM of -inf and 8 lines of RuntimeWarnings). Now
    the run is damaged, named in one line, and the verdict is made of the other runs."""
    arms = {"a": SyntheticArm(1.0, {"algo": "dqn"}), "b": SyntheticArm(1.2, {"algo": "dqn"})}
    exp = write_experiment(tmp_path, "exp", arms, ["CartPole-v1"], [0, 1, 2], n_logs=3, eval_episodes=2)
    table = exp / "a" / "CartPole-v1" / "seed1" / "eval.csv"
    lines = table.read_text().splitlines()
    for i in (-2, -1):
        cells = lines[i].split(",")
        cells[EVAL_COLUMNS.index("return")] = value
        lines[i] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
        assert reports_main(["build", str(exp), "--reps", "100", "--out", str(tmp_path / "r.html")]) == 0
    out, err = capsys.readouterr()
    verdict = next(line for line in out.splitlines() if line.startswith("**Verdict"))
    assert not re.search(r"\b(nan|inf)\b", verdict) and "over 1 game x 2 seeds per arm" in verdict, verdict
    named = f"eval.csv damaged: return {value} at line {len(lines) - 1} is not a finite number"
    assert f"a/CartPole-v1/seed1: {named}" in out and named in (tmp_path / "r.html").read_text()
    assert err == "", err


def test_a_nan_training_return_of_a_row_without_episodes_is_no_damage(tmp_path):
    """The logger writes NaN return columns where no episode ended since the last row."""
    run = write_run(tmp_path, "exp", 0)
    (run / "progress.csv").write_bytes(
        b"env_steps,frames,return_mean,episodes_logged\n100,100,nan,0\n200,200,1.5,2\n"
    )
    data = read_run(run)
    assert data.status == "complete" and not data.problems, data.problems


# --- run files that are not regular files (issue 57, item 3) ----------------------------------------------
# Before, a FIFO named progress.csv or eval.csv blocked the summary, the study and the report forever
# (the open waited for a writer), a device was read until memory ran out, and a directory named
# status.json was read as damage. Each is refused in one line naming it, exit 2, without being opened;
# the timeout turns a regression (a reader blocked on the FIFO) into a failure instead of a hang.
NOT_REGULAR_FILES = ("progress.csv", "eval.csv", "status.json", "config.json", "metadata.json", "plan.json")
NOT_REGULAR_KINDS = ("FIFO", "socket", "directory", "device")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", NOT_REGULAR_KINDS)
@pytest.mark.parametrize("name", NOT_REGULAR_FILES)
def test_a_run_file_that_is_not_a_regular_file_is_refused_unread(tmp_path, capsys, name, kind):
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    bad = (exp if name == "plan.json" else write_run(tmp_path, "exp", 1)) / name
    bad.unlink(missing_ok=True)
    not_a_file(kind, bad)
    for command, (code, _, err) in read_everything(exp, tmp_path, capsys).items():
        if command == "summary" and name == "plan.json":  # the summary reads runs only
            assert code == 0 and err == "", err
            continue
        assert code == 2 and err.count("\n") == 1, (command, err)
        assert f"{bad} is a {kind}, not a regular file" in err, err
        assert "Traceback" not in err


def test_a_run_file_linked_to_a_regular_file_is_read_as_its_target(tmp_path, capsys):
    """The choice ``read_regular`` makes: a symlink is followed; only what it reaches must be a file."""
    exp = tmp_path / "exp"
    write_run(tmp_path, "exp", 0)
    run = write_run(tmp_path, "exp", 1)
    kept = tmp_path / "kept-progress.csv"
    (run / "progress.csv").rename(kept)
    (run / "progress.csv").symlink_to(kept)
    assert read_run(run).status == "complete"
    assert analysis_main(["study", str(exp), "--reps", "100"]) == 0
    assert "from 2 complete runs" in capsys.readouterr().out


# --- a full disk or a read-only directory in the report path (issue 47, item 7) ---------------------------
# ``reports`` or ``analysis`` with the file size limited to ``argv[1]`` bytes: a write past it fails
# (EFBIG), at the point and in the way a full disk's ENOSPC does.
SMALL_DISK = textwrap.dedent(
    """
    import importlib, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
    sys.exit(importlib.import_module(sys.argv[2] + ".__main__").main(sys.argv[3:]))
    """
)
REPORT_WRITERS = {
    "reports": lambda exp, out: ["build", str(exp), "--reps", "100", "--out", str(out)],
    "analysis": lambda exp, out: ["study", str(exp), "--reps", "100", "--csv", str(out)],
}


@pytest.mark.parametrize("tool", sorted(REPORT_WRITERS))
@pytest.mark.parametrize("fault", ["full_disk", "read_only"])
def test_report_and_study_writes_are_whole_or_nothing_and_one_line(tmp_path, tool, fault):
    """Before: a traceback, and a 0-byte (or cut) report.html or CSV left behind."""
    for seed in (0, 1):
        write_run(tmp_path, "exp", seed)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "result"
    argv = REPORT_WRITERS[tool](tmp_path / "exp", out)
    if fault == "full_disk":
        done = subprocess.run([sys.executable, "-c", SMALL_DISK, "64", tool, *argv], cwd=REPO,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        why = "File too large"
    else:
        out_dir.chmod(0o555)
        try:
            done = as_user(tool, *argv)
        finally:
            out_dir.chmod(0o755)
        why = "Permission denied"
    assert done.returncode == 1 and done.stderr == f"{tool}: cannot write {out}: {why}\n", done.stderr[-3000:]
    assert list(out_dir.iterdir()) == []
