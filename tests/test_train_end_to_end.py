"""``train()`` end to end on CartPole with the synchronous runner: the run directory it writes,
same-seed determinism, resume after an interruption without duplicated or missing rows, and the
config.json round trip."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import train_probe_algo as probe

from algorithms import registry
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig, config_from_dict, config_to_dict
from algorithms.rundir import RunDir, read_run
from algorithms.runners.sync import SyncRunner
from algorithms.train import train

TIMING_COLUMNS = {
    "time_sampling_s",
    "time_optimizing_s",
    "time_evaluating_s",
    "time_logging_s",
    "wall_time_s",
    "steps_per_second",
    "frames_per_second",
    "updates_per_second",
}


@pytest.fixture(autouse=True)
def _probe_registered(monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setitem(registry.ALGORITHMS, "probe", probe.__name__)


def make_config(n_steps=400, seed=0, **runner):
    runner = {"log_interval_steps": 100, "eval_interval_steps": 200, **runner}
    return TrainConfig(
        algo="probe",
        algo_config=probe.Config(learning_rate=0.05),
        env=EnvConfig(id="CartPole-v1", kind="gym"),
        sampler=SamplerConfig(batch_T=25, batch_B=2, eval_n_envs=2, eval_episodes=3, eval_max_steps=200),
        runner=RunnerConfig(n_steps=n_steps, seed=seed, **runner),
    )


def without_timings(progress: pd.DataFrame) -> pd.DataFrame:
    return progress.drop(columns=[c for c in progress.columns if c in TIMING_COLUMNS])


def test_train_writes_a_complete_run_directory(tmp_path):
    counters = train(make_config(), tmp_path / "run")
    data = read_run(tmp_path / "run")
    assert data.status == "complete", data.problems
    assert counters.env_steps == 400 and counters.updates == 8 and counters.samples_trained == 400
    progress = data.progress
    assert progress["env_steps"].tolist() == [100, 200, 300, 400]
    assert progress["updates"].tolist() == [2, 4, 6, 8]
    assert progress["frames"].tolist() == [100, 200, 300, 400]  # frameskip 1 off Atari
    assert progress["replay_ratio_trained"].tolist() == [1.0] * 4
    assert {"return_mean", "length_mean", "loss"} <= set(progress.columns)
    assert progress["loss"].notna().all()
    # Episodes finished in a window feed that row; the counters' total is their sum.
    assert progress["episodes_logged"].sum() == counters.episodes
    assert data.eval["env_steps"].tolist() == [200] * 3 + [400] * 3
    assert data.eval["episode"].tolist() == [0, 1, 2] * 2
    assert (data.eval["length"] <= 200).all()
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "complete"
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=True)
    assert checkpoint["counters"]["env_steps"] == 400
    # The probe algorithm has no replay; its envs go in ("sampler", RunnerConfig.checkpoint_replay).
    # The run's identity (algorithms/rundir/writer.py): which run's directory the checkpoint belongs to.
    assert set(checkpoint) == {
        "format", "agent", "algo", "counters", "rng", "runner", "sampler", "run_config_sha256",
    }  # fmt: skip


def test_budget_not_divisible_by_the_batch_logs_a_final_row(tmp_path):
    # 50 steps per batch: boundaries at 120 and 240 are crossed at 150 and 250; the run ends at 300.
    config = make_config(n_steps=280, log_interval_steps=120, eval_interval_steps=0, tensorboard=True)
    counters = train(config, tmp_path / "r")
    data = read_run(tmp_path / "r")
    assert counters.env_steps == 300
    assert data.progress["env_steps"].tolist() == [150, 250, 300]
    assert data.eval["env_steps"].tolist() == [300] * 3  # eval_interval_steps=0: only at the end
    assert list((tmp_path / "r" / "tb").glob("events.out.tfevents.*"))


def test_same_seed_gives_identical_progress_except_timings(tmp_path):
    tables = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        train(make_config(seed=seed), tmp_path / name)
        data = read_run(tmp_path / name)
        tables.append((without_timings(data.progress), data.eval.drop(columns="wall_time_s")))
    pd.testing.assert_frame_equal(tables[0][0], tables[1][0])
    pd.testing.assert_frame_equal(tables[0][1], tables[1][1])
    assert not tables[0][0]["loss"].equals(tables[2][0]["loss"])


class Interrupt(KeyboardInterrupt):
    """Stands in for Ctrl-C or a scheduler's kill in the middle of an update."""


def interrupt_at(monkeypatch, env_steps: int):
    """Make the probe algorithm raise on the optimize call of the batch that reaches ``env_steps``."""
    original = probe.Algo.optimize
    seen = {"steps": 0}

    def optimize(self, itr, samples):
        seen["steps"] += samples.reward.numel()
        if seen["steps"] >= env_steps:
            raise Interrupt
        return original(self, itr, samples)

    monkeypatch.setattr(probe.Algo, "optimize", optimize)


@pytest.mark.parametrize("checkpoint_interval_steps", [0, 200])
def test_resume_continues_without_duplicated_or_missing_rows(
    tmp_path, monkeypatch, checkpoint_interval_steps
):
    config = make_config(n_steps=500, checkpoint_interval_steps=checkpoint_interval_steps)
    train(config, tmp_path / "straight")
    straight = read_run(tmp_path / "straight")

    # Interrupted during the batch reaching step 350: rows at 100..300 are on disk, the last
    # checkpoint is at 300 (every log interval) or at 200 (every 200 steps: the row at 300 must go).
    with monkeypatch.context() as patch:
        interrupt_at(patch, 350)
        with pytest.raises(Interrupt):
            train(config, tmp_path / "resumed")
    interrupted = read_run(tmp_path / "resumed")
    assert json.loads((tmp_path / "resumed" / "status.json").read_text())["state"] == "interrupted"
    assert interrupted.status == "incomplete"
    assert interrupted.progress["env_steps"].tolist() == [100, 200, 300]
    assert interrupted.eval["env_steps"].tolist() == [200] * 3

    counters = train(config, tmp_path / "resumed")
    resumed = read_run(tmp_path / "resumed")
    assert resumed.status == "complete"
    assert counters.env_steps == 500
    for column in ("env_steps", "frames", "updates", "samples_trained", "samples_replayed", "sampler_itrs"):
        assert resumed.progress[column].tolist() == straight.progress[column].tolist(), column
    assert resumed.eval["env_steps"].tolist() == straight.eval["env_steps"].tolist()
    assert resumed.progress["time_sampling_s"].is_monotonic_increasing
    # Episodes are counted across the interruption (each row's window, then the total).
    assert resumed.progress["episodes"].is_monotonic_increasing
    assert resumed.progress["episodes_logged"].sum() <= counters.episodes


def test_resume_restores_parameters_optimizer_counters_and_rng_from_the_checkpoint(tmp_path, monkeypatch):
    config = make_config(n_steps=300, eval_interval_steps=0)
    with monkeypatch.context() as patch:
        interrupt_at(patch, 250)  # the checkpoint at 200 is the last one
        with pytest.raises(Interrupt):
            train(config, tmp_path / "r")
    checkpoint = torch.load(tmp_path / "r" / "checkpoints" / "latest.pt", weights_only=True)
    assert checkpoint["counters"]["env_steps"] == 200

    run = RunDir.open(tmp_path / "r", config_to_dict(config), {"seed": 0})
    runner = SyncRunner.build(config, run, run.load_checkpoint())
    for name, value in runner.agent.state_dict().items():
        assert torch.equal(value, checkpoint["agent"][name]), name
    adam = runner.algo.optimizer.state_dict()["state"]
    assert adam and all(
        torch.equal(adam[k]["exp_avg"], checkpoint["algo"]["optimizer"]["state"][k]["exp_avg"]) for k in adam
    )
    assert runner.counters.env_steps == 200 and runner.counters.updates == 4
    assert torch.equal(torch.get_rng_state(), checkpoint["rng"]["torch"])
    assert runner.next_log == 300 and runner.last_log_steps == 200
    # The row logged at 200 stays; nothing after the checkpoint does.
    assert read_run(tmp_path / "r").progress["env_steps"].tolist() == [100, 200]


def test_a_checkpoint_of_another_model_layout_is_a_one_line_error_naming_the_file(tmp_path, monkeypatch):
    config = make_config(n_steps=300, eval_interval_steps=0)
    with monkeypatch.context() as patch:
        interrupt_at(patch, 250)
        with pytest.raises(Interrupt):
            train(config, tmp_path / "r")
    path = tmp_path / "r" / "checkpoints" / "latest.pt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["agent"] = {f"old_{name}": value for name, value in checkpoint["agent"].items()}
    torch.save(checkpoint, path)
    with pytest.raises(ValueError) as error:
        train(config, tmp_path / "r")
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "does not fit this run's probe agent" in message
    assert "Missing key(s)" in message


def test_a_finished_run_is_not_trained_again(tmp_path):
    config = make_config(n_steps=200, eval_interval_steps=0)
    train(config, tmp_path / "r")
    before = read_run(tmp_path / "r")
    counters = train(config, tmp_path / "r")
    after = read_run(tmp_path / "r")
    assert counters.env_steps == 200 and counters.updates == 4
    pd.testing.assert_frame_equal(before.progress, after.progress)
    pd.testing.assert_frame_equal(before.eval, after.eval)
    assert after.status == "complete"


def test_resume_refuses_a_different_config_and_fresh_refuses_an_existing_run(tmp_path):
    train(make_config(n_steps=100), tmp_path / "r")
    with pytest.raises(ValueError, match="config differs at 'runner.seed'"):
        train(make_config(n_steps=100, seed=5), tmp_path / "r")
    with pytest.raises(FileExistsError):
        train(make_config(n_steps=100), tmp_path / "r", resume=False)


def test_a_run_written_before_a_field_was_added_resumes(tmp_path):
    """config.json without ``runner.checkpoint_replay`` (added later, default "auto"): read in today's
    form, so the run resumes (the file stays as written); a real difference is still refused."""
    train(make_config(n_steps=200, eval_interval_steps=0), tmp_path / "r")
    config_file = tmp_path / "r" / "config.json"
    stored = json.loads(config_file.read_text())
    del stored["runner"]["checkpoint_replay"]
    config_file.write_text(json.dumps(stored))
    counters = train(make_config(n_steps=200, eval_interval_steps=0), tmp_path / "r")
    assert counters.env_steps == 200
    assert json.loads(config_file.read_text()) == stored
    with pytest.raises(ValueError, match="config differs at 'runner.seed'"):
        train(make_config(n_steps=200, eval_interval_steps=0, seed=5), tmp_path / "r")


def test_failure_marks_the_run_failed_with_the_error(tmp_path, monkeypatch):
    def broken(self, itr, samples):
        raise RuntimeError("loss is NaN")

    monkeypatch.setattr(probe.Algo, "optimize", broken)
    with pytest.raises(RuntimeError, match="loss is NaN"):
        train(make_config(n_steps=100), tmp_path / "r")
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert status == {**status, "state": "failed", "error": "RuntimeError: loss is NaN"}


def test_config_round_trips_through_json():
    config = make_config(n_steps=1234, device="cuda:1", tensorboard=True)
    text = json.dumps(config_to_dict(config))
    assert config_from_dict(json.loads(text)) == config
    data = json.loads(text)
    data["env"]["max_episode_steps"] = 50
    assert config_from_dict(data).env.max_episode_steps == 50
    data["algo_config"]["learning_rte"] = 0.1
    with pytest.raises(ValueError, match=r"config.json \[algo_config\]: unknown key 'learning_rte'"):
        config_from_dict(data)


def test_train_config_checks_its_parts():
    good = make_config()
    with pytest.raises(ValueError, match="unknown algorithm 'dqn3'"):
        TrainConfig("dqn3", good.algo_config, good.env)
    with pytest.raises(TypeError, match="TrainConfig.algo_config must be"):
        TrainConfig("probe", {"learning_rate": 0.1}, good.env)
    with pytest.raises(TypeError, match="TrainConfig.env must be EnvConfig"):
        TrainConfig("probe", good.algo_config, {"id": "CartPole-v1"})
    with pytest.raises(ValueError, match="TrainConfig.sampler.mode must be 'serial' with runner.kind 'ddp'"):
        TrainConfig("probe", good.algo_config, good.env, SamplerConfig(mode="cpu"), RunnerConfig(kind="ddp"))
