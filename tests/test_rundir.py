"""Run directories: atomic writes, torn-line tolerance, resume truncation, status, checkpoints, metadata."""

import json
import math

import numpy as np
import pytest
import torch

from algorithms.counters import Counters
from algorithms.logger import RunLogger, episode_stats
from algorithms.rundir import (
    START_KEYS,
    CsvTable,
    RunDir,
    find_runs,
    is_complete,
    read_run,
    read_table,
    rng_state,
    run_path,
    set_rng_state,
)
from algorithms.rundir import meta as run_meta

CONFIG = {"algo": "dqn", "algo_config": {"lr": 1e-4, "n_step": 3}, "env": {"id": "CartPole-v1"}}


def make_run(tmp_path, **kw):
    return RunDir.open(run_path(tmp_path, "exp", "arm", "CartPole-v1", 0), CONFIG, {"seed": 0}, **kw)


def test_layout_and_metadata(tmp_path):
    run = make_run(tmp_path)
    assert run.path == tmp_path / "exp" / "arm" / "CartPole-v1" / "seed0"
    meta = json.loads((run.path / "metadata.json").read_text())
    for key in (
        "git_commit",
        "git_dirty",
        "packages",
        "python",
        "hostname",
        "cpu_model",
        "cpu_count",
        "gpu_model",
        "seeds",
        "start_time",
    ):
        assert key in meta
    assert meta["packages"]["torch"].startswith("2.")
    assert json.loads((run.path / "config.json").read_text()) == CONFIG
    assert json.loads((run.path / "status.json").read_text())["state"] == "running"


def test_progress_eval_and_status_read_back(tmp_path):
    run = make_run(tmp_path)
    for i in range(3):
        run.append_progress({"env_steps": 100 * (i + 1), "return_mean": float(i)})
    run.append_eval(
        [
            {
                "env_steps": 300,
                "frames": 300,
                "updates": 2,
                "wall_time_s": 1.0,
                "episode": e,
                "return": 10.0 + e,
                "length": 5,
            }
            for e in range(2)
        ]
    )
    assert read_run(run.path).status == "incomplete"
    run.set_status("complete")
    data = read_run(run.path)
    assert data.status == "complete" and data.problems == []
    assert data.progress["env_steps"].tolist() == [100, 200, 300]
    assert data.eval["return"].tolist() == [10.0, 11.0]
    assert data.config == CONFIG and is_complete(run.path)


def test_unknown_progress_column_is_an_error(tmp_path):
    run = make_run(tmp_path)
    run.append_progress({"env_steps": 1, "a": 1.0})
    with pytest.raises(KeyError, match="not in the table header"):
        run.append_progress({"env_steps": 2, "b": 1.0})


def test_torn_last_line_is_dropped_and_repaired(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text("env_steps,x\n1,0.5\n2,0.7\n3,0.")
    table, problems = read_table(path)
    assert table["env_steps"].tolist() == [1, 2] and "torn" in problems[0]
    t = CsvTable(path)  # reopening for append cuts the torn tail first
    t.append({"env_steps": 3, "x": 0.9})
    table, problems = read_table(path)
    assert table["env_steps"].tolist() == [1, 2, 3] and problems == []


def test_corrupt_and_missing_files_are_reported(tmp_path):
    run = make_run(tmp_path)
    run.append_progress({"env_steps": 1})
    (run.path / "config.json").write_text("{not json")
    data = read_run(run.path)
    assert data.status == "corrupt" and any("config.json unreadable" in p for p in data.problems)
    other = make_run(tmp_path / "b")
    (other.path / "metadata.json").unlink()
    # Without a row it stopped at its start, before it wrote metadata.json: nothing to distrust.
    assert read_run(other.path).status == "incomplete"
    other.append_progress({"env_steps": 1})
    assert read_run(other.path).status == "corrupt"


def test_failed_run_is_incomplete_with_error(tmp_path):
    run = make_run(tmp_path)
    run.append_progress({"env_steps": 1})
    run.set_status("failed", "RuntimeError: boom")
    data = read_run(run.path)
    assert data.status == "incomplete" and data.state == "failed"
    assert any("boom" in p for p in data.problems)


def test_a_later_start_is_recorded_with_its_host_and_code_beside_the_first(tmp_path, monkeypatch):
    first = make_run(tmp_path)
    assert not first.reopened
    first.close()
    file = first.path / "metadata.json"
    before = json.loads(file.read_text())
    monkeypatch.setattr(run_meta, "_cpu_model", lambda: "Another CPU")
    again = make_run(tmp_path)
    assert again.reopened
    entry = again.note_resume(300, envs_restarted=True)
    again.close()
    after = json.loads(file.read_text())
    assert after.pop("resumes") == [entry] and after == before  # the first start's record kept
    assert set(START_KEYS) <= set(entry) and entry["cpu_model"] == "Another CPU"
    assert entry["env_steps"] == 300 and entry["envs_restarted"] is True and entry["time"]
    third = make_run(tmp_path)
    third.note_resume(400)
    third.close()
    assert [e["env_steps"] for e in json.loads(file.read_text())["resumes"]] == [300, 400]


@pytest.mark.parametrize(("damage", "why"), [(b"[]", "not a JSON object"), (b"\xff{", "unreadable")])
def test_a_resume_over_a_damaged_metadata_json_is_one_line(tmp_path, damage, why):
    make_run(tmp_path).close()
    file = tmp_path / "exp" / "arm" / "CartPole-v1" / "seed0" / "metadata.json"
    file.write_bytes(damage)
    run = make_run(tmp_path)
    with pytest.raises(ValueError, match=f"metadata.json: {why}.*move it aside to resume the run"):
        run.note_resume(100)
    run.close()
    assert file.read_bytes() == damage  # left as it was


def test_resume_checks_config_and_truncates_rows_after_checkpoint(tmp_path):
    run = make_run(tmp_path)
    for steps in (100, 200, 300):
        run.append_progress({"env_steps": steps, "v": 0.0})
    run.append_eval(
        [
            {
                "env_steps": 300,
                "frames": 300,
                "updates": 1,
                "wall_time_s": 0,
                "episode": 0,
                "return": 1,
                "length": 1,
            }
        ]
    )
    with pytest.raises(FileExistsError):
        make_run(tmp_path, resume=False)
    with pytest.raises(ValueError, match="algo_config.lr"):
        RunDir.open(run.path, {**CONFIG, "algo_config": {"lr": 1e-3, "n_step": 3}}, {"seed": 0})
    resumed = make_run(tmp_path)
    resumed.truncate_progress_after(200)
    resumed.append_progress({"env_steps": 300, "v": 1.0})
    data = read_run(run.path)
    assert data.progress["env_steps"].tolist() == [100, 200, 300]
    assert data.progress["v"].tolist() == [0.0, 0.0, 1.0]
    assert data.eval.empty


def test_checkpoint_round_trip_weights_only_with_rng(tmp_path):
    run = make_run(tmp_path)
    assert run.load_checkpoint() is None
    torch.manual_seed(3)
    np.random.seed(4)
    state = {
        "model": {"w": torch.arange(3.0)},
        "counters": Counters(env_steps=5).state_dict(),
        "rng": rng_state(),
    }
    run.save_checkpoint(state)
    expected = (torch.rand(2), np.random.rand(2))
    loaded = run.load_checkpoint()
    assert torch.equal(loaded["model"]["w"], torch.arange(3.0))
    assert loaded["counters"]["env_steps"] == 5
    set_rng_state(loaded["rng"])
    assert torch.equal(torch.rand(2), expected[0]) and np.array_equal(np.random.rand(2), expected[1])
    assert not list(run.checkpoint_path.parent.glob("*.tmp"))


@pytest.mark.parametrize("links", [True, False])
def test_latest_checkpoint_is_never_absent_while_the_next_is_saved(tmp_path, monkeypatch, links):
    """The Ray driver mirrors a run directory while its job checkpoints (repro/mirror.py): between
    any two file operations ``latest.pt`` exists, and the one it replaces becomes ``previous.pt``;
    also where the file system has no hard links."""
    import algorithms.rundir.writer as writer

    run = make_run(tmp_path)
    latest = run.checkpoint_path
    run.save_checkpoint({"w": torch.zeros(1), "counters": Counters(env_steps=5).state_dict()})
    real_replace = writer.os.replace
    seen = []

    def replace(src, dst):
        real_replace(src, dst)
        seen.append(latest.exists())

    monkeypatch.setattr(writer.os, "replace", replace)
    if not links:
        monkeypatch.setattr(writer.os, "link", lambda *a: (_ for _ in ()).throw(OSError("no links")))
    run.save_checkpoint({"w": torch.ones(1), "counters": Counters(env_steps=10).state_dict()})
    assert seen and all(seen)
    assert torch.equal(run.load_checkpoint()["w"], torch.ones(1))
    previous = torch.load(run.previous_checkpoint_path, weights_only=True)
    assert torch.equal(previous["w"], torch.zeros(1))
    assert not list(latest.parent.glob(".*.tmp"))


def test_a_checkpoint_saved_after_a_kill_between_link_and_rename_leaves_no_temporary_file(tmp_path):
    """A kill after previous.pt became a link to latest.pt and before the new latest.pt: the next
    save keeps that file as previous.pt (renaming another link of the same file onto it would do
    nothing and leave the temporary name behind)."""
    run = make_run(tmp_path)
    run.save_checkpoint({"w": torch.zeros(1), "counters": Counters(env_steps=5).state_dict()})
    run.previous_checkpoint_path.unlink(missing_ok=True)
    run.previous_checkpoint_path.hardlink_to(run.checkpoint_path)
    run.save_checkpoint({"w": torch.ones(1), "counters": Counters(env_steps=10).state_dict()})
    assert not list(run.checkpoint_path.parent.glob(".*.tmp"))
    assert torch.equal(torch.load(run.previous_checkpoint_path, weights_only=True)["w"], torch.zeros(1))
    assert torch.equal(run.load_checkpoint()["w"], torch.ones(1))


def test_find_runs(tmp_path):
    for seed in (0, 1):
        RunDir.open(run_path(tmp_path, "exp", "a", "pong", seed), CONFIG, {"seed": seed})
    (tmp_path / "exp" / "a" / "pong" / "seed_notes").mkdir()
    assert [p.name for p in find_runs(tmp_path / "exp")] == ["seed0", "seed1"]


def test_run_logger_rows_and_diagnostics_contract(tmp_path):
    run = make_run(tmp_path)
    counters = Counters(frameskip=4)
    logger = RunLogger(run, total_steps=100, console=False, tensorboard=True)
    counters.add_env_steps(50, episodes=2)
    row = logger.log(counters, [{"return": 1.0, "length": 10}, {"return": 3.0, "length": 30}], {"loss": 0.5})
    assert row["return_mean"] == 2.0 and row["length_mean"] == 20.0 and row["frames"] == 200
    counters.add_env_steps(50)
    row = logger.log(counters, [], {})
    assert math.isnan(row["return_mean"]) and math.isnan(row["loss"])
    with pytest.raises(KeyError, match="same diagnostics keys"):
        logger.log(counters, [], {"loss": 1.0, "new": 2.0})
    logger.close()
    run.close()
    assert list((run.path / "tb").iterdir())
    assert read_run(run.path).progress["env_steps"].tolist() == [50, 100]
    assert episode_stats([])["episodes_logged"] == 0


def test_run_logger_with_declared_diagnostics_takes_a_first_row_before_any_update(tmp_path):
    """The asynchronous runner can log before the algorithm's first call: with the algorithm's
    declared keys the early row has them as NaN and later rows may fill them."""
    run = make_run(tmp_path)
    counters = Counters()
    logger = RunLogger(run, total_steps=100, console=False, diagnostic_keys=("q_mean", "loss"))
    counters.add_env_steps(50)
    assert math.isnan(logger.log(counters, [], {})["loss"])
    counters.add_env_steps(50)
    assert logger.log(counters, [], {"loss": 0.5, "q_mean": 1.0})["loss"] == 0.5
    with pytest.raises(KeyError, match=r"diagnostics \['new'\] appeared"):
        logger.log(counters, [], {"loss": 1.0, "new": 2.0})
    logger.close()
    run.close()
    assert list(read_run(run.path).progress.columns[-2:]) == ["loss", "q_mean"]


def test_atomic_writes_take_the_umask_or_keep_the_mode_of_the_file_they_replace(tmp_path, monkeypatch):
    """``mkstemp`` creates its files 0o600: every report, table, status and checkpoint once came out
    readable by its owner alone, whatever the umask."""
    import os

    import algorithms.rundir.atomic as atomic

    umask = os.umask(0o022)
    os.umask(umask)
    assert atomic._UMASK == umask  # the process's own

    def mode(path):
        return path.stat().st_mode & 0o777

    monkeypatch.setattr(atomic, "_UMASK", 0o022)
    report = tmp_path / "report.html"
    atomic.atomic_write_bytes(report, b"new")
    assert mode(report) == 0o644
    report.chmod(0o640)
    atomic.atomic_write_bytes(report, b"replaced")
    assert mode(report) == 0o640 and report.read_bytes() == b"replaced"
    run = make_run(tmp_path)
    run.save_checkpoint({"w": torch.zeros(1), "counters": Counters(env_steps=5).state_dict()})
    written = (run.path / "status.json", run.path / "config.json", run.checkpoint_path)
    assert [mode(p) for p in written] == [0o644] * 3
    monkeypatch.setattr(atomic, "_UMASK", 0o077)
    private = tmp_path / "private.csv"
    atomic.atomic_write_bytes(private, b"x")
    assert mode(private) == 0o600


def test_code_shipped_without_its_git_records_the_state_it_was_shipped_with(monkeypatch, tmp_path):
    shipped = {"commit": "a" * 40, "dirty": True}
    monkeypatch.setenv(run_meta.CODE_STATE_ENV, json.dumps(shipped))
    assert run_meta.git_state() == ("a" * 40, True)
    record = run_meta.start_record()
    assert (record["git_commit"], record["git_dirty"]) == ("a" * 40, True)
    assert run_meta.git_state(tmp_path) == (None, None)  # a checkout named is asked itself: here none
