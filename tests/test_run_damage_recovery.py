"""A run directory repaired on its own (``RunDir.recover``, ``completion``, ``schedule_gap``): a torn
or lost progress row before a valid checkpoint is repaired from the last point the table and a
checkpoint agree on, and said; a table cut back keeps the bytes of the rows it keeps; a lost middle
row makes a complete run unfinished to every reader and is repaired from a checkpoint before it or
afresh; a checkpoint copied from another seed is not resumed.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from run_damage_helpers import LOG_EVERY, ROWS, STEPS, check_exact, rows, tear_last_row

from algorithms.algos import a2c
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import RunDir, completion, read_run, run_path, schedule_gap
from algorithms.train import train
from analysis.__main__ import main as analysis_main
from repro.summary import summary_text

# --- a torn or lost progress row before a valid checkpoint -------------------------------------------
CONFIG = TrainConfig(
    algo="a2c",
    algo_config=a2c.Config(hidden_sizes=(16,)),
    env=EnvConfig(id="CartPole-v1", kind="gym"),
    sampler=SamplerConfig(batch_T=5, batch_B=2, eval_episodes=1, eval_max_steps=20),
    runner=RunnerConfig(n_steps=STEPS, log_interval_steps=LOG_EVERY, seed=1),
)


@pytest.mark.parametrize("how", ["torn", "half_with_newline", "lost"])
def test_a_lost_row_before_the_checkpoint_is_rerun_from_previous_and_said(tmp_path, monkeypatch, capfd, how):
    """Stopped after its 5th checkpoint (1,000 env steps), then the row at 1,000 damaged: before, the
    resumed run went on from 1,000 and the table read [..., 800, 1200, ...] with no word of it."""
    run_dir = tmp_path / "run"
    saves, real_save = [0], RunDir.save_checkpoint

    def save_then_stop(self, state):
        real_save(self, state)
        saves[0] += 1
        if saves[0] == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(CONFIG, run_dir)
    monkeypatch.setattr(RunDir, "save_checkpoint", real_save)
    assert rows(run_dir) == ROWS[:5]
    tear_last_row(run_dir / "progress.csv", how)
    capfd.readouterr()

    train(CONFIG, run_dir)
    err = capfd.readouterr().err
    assert err.count("\n") == 1, err
    assert "progress.csv ends at env_steps 800 without the row at 1,000 (torn or lost) that " in err
    assert "checkpoints/latest.pt logged: resuming from previous.pt at 800 env steps" in err
    check_exact(run_dir)


def test_without_a_checkpoint_the_table_agrees_with_the_run_starts_afresh(tmp_path, capfd):
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    for steps in (100, 200):
        run.append_progress({"env_steps": steps})
    run.save_checkpoint({"counters": {"env_steps": 200}, "runner": {"last_log_steps": 200}})
    tear_last_row(run.path / "progress.csv", "lost")
    checkpoint, repaired = run.recover()
    assert checkpoint is None and not run.checkpoint_path.exists()
    assert repaired == (
        "progress.csv ends at env_steps 100 without the row at 200 (torn or lost) that checkpoints/latest.pt "
        "logged: starting afresh, progress.csv and eval.csv emptied"
    )
    assert not (run.path / "progress.csv").exists()
    run.close()


def test_cutting_a_table_back_keeps_the_bytes_of_the_rows_it_keeps(tmp_path):
    """A resumed run's earlier rows must not change: re-serialising them through pandas wrote floats
    with 15 significant digits (0.04209942100033004 back as 0.04209942100033: the timings of 192 of
    205 progress tables of a test run), a NaN logged as ``nan`` back as an empty cell and an int of
    a column with NaNs as a float. The two-node Ray test compares a retried run's rows with the lost
    attempt's byte for byte, and failed when the retry had rows to cut (a row streamed to the driver
    before its checkpoint, more likely under load)."""
    run = RunDir.open(tmp_path / "r", {"a": 1}, {"seed": 0})
    rows_ = ((100, "", float("nan"), 0.04209942100033004), (200, 2, 1.5, 0.1), (300, 3, 2.0, 0.2))
    for steps, episodes, ret, seconds in rows_:
        run.append_progress({"env_steps": steps, "episodes": episodes, "return": ret, "time_s": seconds})
    before = (run.path / "progress.csv").read_bytes()
    assert run.progress.truncate_after("env_steps", 200) == 2
    assert (run.path / "progress.csv").read_bytes() == before[: before.index(b"300,")]
    run.close()


# --- a lost middle row: one rule of "complete" (issue 47, item 9) ----------------------------------------
def test_schedule_gap_finds_a_lost_row_from_the_rows_alone():
    """Hand-computed: rows every 200 env steps of batches of 10 (``sampler_itrs`` counts batches)."""
    assert schedule_gap([200, 400, 600, 800], [20, 40, 60, 80], 200) is None
    assert (
        schedule_gap([200, 400, 800, 1000], [20, 40, 80, 100], 200)
        == "lacks the row due at 600 env steps (it goes from 400 to 800)"
    )
    assert schedule_gap([400], [40], 200) == "lacks the row due at 200 env steps (it goes from 0 to 400)"
    # A row just past each multiple (batches of 80 against 25,000), and the last at the budget.
    assert schedule_gap([25040, 50000, 75040, 80000], [313, 625, 938, 1000], 25000) is None
    # Batches larger than the interval: every batch logs, each past several multiples.
    assert schedule_gap([250, 500, 750], [1, 2, 3], 100) is None
    # Without the iterations the batch is not known, so nothing is claimed.
    assert schedule_gap([200, 800], [math.nan, math.nan], 200) is None


def scheduled_run(root: Path, lost: int | None = None) -> Path:
    """A complete run of 1,000 env steps, a row every 200 (batches of 10), the row at ``lost`` removed."""
    path = run_path(root, "exp", "arm", "minatar_breakout", 0)
    run = RunDir.open(path, {"runner": {"n_steps": 1000, "log_interval_steps": 200}}, {"seed": 0})
    for steps in range(200, 1001, 200):
        run.append_progress({"env_steps": steps, "sampler_itrs": steps // 10, "return_mean": 1.0,
                             "episodes_logged": 1})  # fmt: skip
    run.append_eval([{"env_steps": 1000, "frames": 1000, "updates": 1, "wall_time_s": 1, "episode": 0,
                      "return": 1.0, "length": 3}])  # fmt: skip
    run.set_status("complete")
    run.close()
    if lost is not None:
        table = path / "progress.csv"
        table.write_bytes(b"".join(x for x in table.read_bytes().splitlines(keepends=True)
                                   if not x.startswith(f"{lost},".encode())))  # fmt: skip
    return path


def test_a_lost_middle_row_makes_a_complete_run_unfinished_to_every_reader(tmp_path, capsys):
    assert completion(scheduled_run(tmp_path / "whole")) == (True, None)
    run = scheduled_run(tmp_path, lost=600)
    said = "status.json says complete but progress.csv lacks the row due at 600 env steps (it goes from 400 "
    said += "to 800)"
    assert completion(run) == (False, f"{said}: repairing it")
    data = read_run(run)
    assert data.status == "incomplete" and said in data.problems
    assert "runs status.json calls complete that are not" in summary_text(tmp_path / "exp")
    assert analysis_main(["study", str(tmp_path / "exp"), "--reps", "100"]) == 0
    assert "from 0 complete runs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("lost", "expected"),
    [
        (200, (None, "progress.csv lacks the row due at 200 env steps (it goes from 100 to 300) that "
                     "checkpoints/latest.pt logged; progress.csv lacks the row due at 200 env steps (it goes "
                     "from 100 to 300) that checkpoints/previous.pt logged: starting afresh, progress.csv "
                     "and eval.csv emptied")),
        (400, (300, "progress.csv lacks the row due at 400 env steps (it goes from 300 to 500) that "
                    "checkpoints/latest.pt logged: resuming from previous.pt at 300 env steps, tables cut "
                    "back to it")),
    ],
)  # fmt: skip
def test_a_lost_middle_row_is_repaired_from_a_checkpoint_before_it_or_afresh(tmp_path, lost, expected):
    """A resumed run never fills a gap before its checkpoint: before, it went on from ``latest.pt`` and
    the table kept the hole for good."""
    run = RunDir.open(tmp_path / "r", {"runner": {"log_interval_steps": 100}}, {"seed": 0})
    for steps in range(100, 501, 100):
        run.append_progress({"env_steps": steps, "sampler_itrs": steps // 10})
        if steps in (300, 500):
            run.save_checkpoint({"counters": {"env_steps": steps}, "runner": {"last_log_steps": steps}})
    table = run.path / "progress.csv"
    table.write_bytes(b"".join(x for x in table.read_bytes().splitlines(keepends=True)
                               if not x.startswith(f"{lost},".encode())))  # fmt: skip
    checkpoint, said = run.recover()
    assert (checkpoint and checkpoint["counters"]["env_steps"], said) == expected
    run.close()


# --- smaller faults (issue 47, item 12) ---------------------------------------------------------------------
def test_a_checkpoint_copied_from_another_seed_is_not_resumed(tmp_path, capfd):
    """Before, a run resumed from another seed's checkpoint and ended a mixed run marked complete."""
    runs = {}
    for seed in (0, 1):
        run = RunDir.open(tmp_path / f"seed{seed}", {"runner": {"seed": seed}}, {"seed": seed})
        run.append_progress({"env_steps": 100})
        run.save_checkpoint({"counters": {"env_steps": 100}, "runner": {"last_log_steps": 100}})
        runs[seed] = run
    shutil.copyfile(runs[0].checkpoint_path, runs[1].checkpoint_path)
    runs[1].previous_checkpoint_path.unlink(missing_ok=True)
    checkpoint, said = runs[1].recover()
    assert checkpoint is None and "another run's checkpoint" in said and "starting afresh" in said, said
    assert runs[0].recover() == (runs[0].load_checkpoint(), None)  # its own is resumed as before
    for run in runs.values():
        run.close()
