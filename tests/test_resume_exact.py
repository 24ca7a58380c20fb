"""A run interrupted and resumed from its checkpoint equals the uninterrupted run update for update
(``RunnerConfig.checkpoint_replay``, algorithms/runners/sync.py): every progress and eval column but
the clocks, and the final parameters, optimizer and replay, bit for bit. Without the replay and the
envs' state in the checkpoint ("never", or a checkpoint from before they were saved) a resume
refills the replay and starts fresh episodes, as before, and says so."""

from __future__ import annotations

import dataclasses
import io
import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from interrupts import ctrl_c_in_optimize

from algorithms import registry, resume
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RunnerConfig, SamplerConfig, TrainConfig
from algorithms.rundir import read_run
from algorithms.train import train

MINATAR = EnvConfig(id="minatar_breakout", kind="minatar")
CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")

# Tiny sizes: updates start at step 64 and run on most batches; the replay wraps around in DQN's case.
R2D1 = dict(
    conv_torso="minatar",
    lstm_size=16,
    head_hidden_size=16,
    burn_in_steps=4,
    sequence_length_steps=8,
    sequence_period_steps=4,
    n_step=2,
    batch_size_sequences=4,
    replay_size_steps=1_000,
    learning_starts_steps=64,
    replay_ratio=2.0,
    target_update_period_updates=5,
    eps_per_env="apex",
)
DQN = dict(
    batch_size=16,
    env_steps_per_update=4,
    replay_size_steps=200,
    learning_starts_steps=64,
    target_update_period_updates=5,
    eps_decay_steps=100,
    prioritized=True,
    n_step=3,
    mlp_hidden_sizes=(16,),
    hidden_size=16,
)


def config(algo: str, env: EnvConfig, checkpoint_replay: str = "auto", **algo_kw) -> TrainConfig:
    return TrainConfig(
        algo=algo,
        algo_config=registry.config_class(algo)(**algo_kw),
        env=env,
        sampler=SamplerConfig(batch_T=8, batch_B=2, eval_n_envs=1, eval_episodes=2, eval_max_steps=30),
        runner=RunnerConfig(
            n_steps=320,
            log_interval_steps=32,
            eval_interval_steps=96,
            checkpoint_interval_steps=64,
            seed=3,
            checkpoint_replay=checkpoint_replay,
        ),
    )


# 16 env steps per batch over 3 per update: a remainder carries from batch to batch.
QPG = dict(
    batch_size=16,
    replay_size_steps=200,
    random_steps=16,
    learning_starts_steps=32,
    env_steps_per_update=3.0,
    hidden_sizes=(16,),
)
PENDULUM = EnvConfig(id="Pendulum-v1", kind="gym")

CASES = {
    "r2d1_minatar": config("r2d1", MINATAR, **R2D1),
    "dqn_minatar": config("dqn", MINATAR, **{**DQN, "conv_torso": "minatar"}),
    "dqn_cartpole": config("dqn", CARTPOLE, **DQN),
    "sac_pendulum": config("sac", PENDULUM, **QPG),
    "td3_pendulum": config("td3", PENDULUM, **QPG),
}


def without_clocks(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=[c for c in table.columns if "time" in c or "per_second" in c])


def interrupted_then_resumed(config: TrainConfig, run_dir, monkeypatch, at_call: int) -> None:
    """Train ``config`` into ``run_dir``, stopped by a Ctrl-C in its ``at_call``-th optimize call,
    then train it again (the resume)."""
    ctrl_c_in_optimize(config, run_dir, monkeypatch, at_call)
    train(config, run_dir)


def assert_same_tensors(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, where


def assert_same_envs(a: dict, b: dict) -> None:
    """Two saved vector-env states are the same: equal bookkeeping, and envs that step alike (the
    pickles' bytes may differ where pickle shares objects differently)."""
    left, right = a["backend"].pop("envs"), b["backend"].pop("envs")
    assert_same_tensors(a, b, "env")
    for one, other in zip(left, right, strict=True):
        for t in range(300):
            space = one.action_space
            action = (
                t % space.n if hasattr(space, "n") else space.low + (space.high - space.low) * (t % 7) / 6
            )
            step, other_step = one.step(action), other.step(action)
            assert (step[0] == other_step[0]).all() and step[1:4] == other_step[1:4], t
            if step[2] or step[3]:
                assert (one.reset()[0] == other.reset()[0]).all()


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_interrupted_run_resumes_exactly(tmp_path, monkeypatch, capfd, case):
    torch.set_num_threads(1)
    config = CASES[case]
    train(config, tmp_path / "straight")
    # 16 env steps per call: the 15th call reaches step 240; the last checkpoint is at 192, after
    # updates since step 64, and the resumed run repeats 192..240 before going on to 320.
    interrupted_then_resumed(config, tmp_path / "resumed", monkeypatch, at_call=15)
    err = capfd.readouterr().err
    assert "resuming" not in err  # nothing was left out of the checkpoint
    assert "resumed from its checkpoint at 192 env steps" in err  # where, for analysis/interruptions.py

    straight, resumed = read_run(tmp_path / "straight"), read_run(tmp_path / "resumed")
    assert resumed.status == "complete", resumed.problems
    # The later start in metadata.json, from the checkpoint it continued from (analysis/interruptions.py).
    assert [start["env_steps"] for start in resumed.metadata["resumes"]] == [192]
    assert "resumes" not in straight.metadata
    updates = straight.progress.set_index("env_steps")["updates"]
    assert 0 < updates[192] < updates[256] < updates[320]  # updates before and after the interruption
    pd.testing.assert_frame_equal(without_clocks(resumed.progress), without_clocks(straight.progress))
    pd.testing.assert_frame_equal(without_clocks(resumed.eval), without_clocks(straight.eval))

    final = [
        torch.load(tmp_path / name / "checkpoints" / "latest.pt", weights_only=True)
        for name in ("straight", "resumed")
    ]
    for key in ("agent", "algo", "replay"):
        assert_same_tensors(final[0][key], final[1][key], key)
    counts = [{k: v for k, v in f["counters"].items() if "time" not in k} for f in final]
    assert counts[0] == counts[1]
    samplers = [resume.unpickle_tree(f["sampler"]) for f in final]
    for key in ("start_env_steps", "stepper", "streams"):
        assert_same_tensors(samplers[0][key], samplers[1][key], key)
    assert_same_envs(samplers[0]["env"], samplers[1]["env"])
    assert_same_envs(samplers[0]["eval"]["env"], samplers[1]["eval"]["env"])
    assert_same_tensors(samplers[0]["eval"]["streams"], samplers[1]["eval"]["streams"], "eval streams")


def test_never_resumes_as_before_and_says_so(tmp_path, monkeypatch, capfd):
    """Without the replay and the envs in its checkpoints, a resumed DQN run refills its replay:
    its learning restarts ``learning_starts_steps`` after the checkpoint (64 steps, 4 calls)."""
    torch.set_num_threads(1)
    config = CASES["dqn_cartpole"]
    never = dataclasses.replace(config, runner=dataclasses.replace(config.runner, checkpoint_replay="never"))
    interrupted_then_resumed(never, tmp_path / "never", monkeypatch, at_call=15)
    checkpoint = torch.load(tmp_path / "never" / "checkpoints" / "latest.pt", weights_only=True)
    assert "replay" not in checkpoint and "sampler" not in checkpoint
    err = capfd.readouterr().err
    assert "resuming at 192 env steps without the replay" in err and "checkpoint_replay = 'never'" in err
    train(config, tmp_path / "auto")
    auto, never_run = read_run(tmp_path / "auto").progress, read_run(tmp_path / "never").progress
    before = never_run["env_steps"] <= 192
    pd.testing.assert_frame_equal(without_clocks(auto[before]), without_clocks(never_run[before]))
    # Updates every 4 env steps once 64 are stored: the resumed run stores 64 new ones first.
    updates = never_run.set_index("env_steps")["updates"]
    assert updates[224] == updates[192] and updates[288] > updates[256] > updates[224]
    assert (auto.set_index("env_steps")["updates"] > updates).loc[224:].all()


def test_a_replay_too_large_for_auto_is_left_out_and_said_so_and_always_saves_it(
    tmp_path, monkeypatch, capfd
):
    torch.set_num_threads(1)
    monkeypatch.setattr(resume, "AUTO_REPLAY_LIMIT_BYTES", 1_000)
    config = CASES["dqn_cartpole"]
    interrupted_then_resumed(config, tmp_path / "auto", monkeypatch, at_call=15)
    err = capfd.readouterr().err
    assert err.count("over 0 GiB, so checkpoints leave it out") == 2  # once per process run
    assert "resuming at 192 env steps without the replay (it refills" in err
    assert "the envs' state" not in err  # the envs still went in
    checkpoint = torch.load(tmp_path / "auto" / "checkpoints" / "latest.pt", weights_only=True)
    assert "replay" not in checkpoint and "sampler" in checkpoint

    always = dataclasses.replace(
        config, runner=dataclasses.replace(config.runner, checkpoint_replay="always")
    )
    interrupted_then_resumed(always, tmp_path / "always", monkeypatch, at_call=15)
    err = capfd.readouterr().err
    assert "leave it out" not in err and "resuming" not in err
    checkpoint = torch.load(tmp_path / "always" / "checkpoints" / "latest.pt", weights_only=True)
    assert resume.nbytes(checkpoint["replay"]) > 1_000 and "sampler" in checkpoint


class Evil:
    """Unpickles to a call of ``print``: what a crafted checkpoint could try."""

    def __reduce__(self):
        return (print, ("unpickled code ran",))


def test_an_old_damaged_or_crafted_checkpoint_resumes_as_before(tmp_path, monkeypatch, capfd):
    """A checkpoint without the replay and envs (as written before they were saved) resumes with an
    empty replay and fresh envs; env state naming a global the restricted unpickler refuses falls
    back to fresh envs without running it; a latest.pt that does not load gives way to previous.pt
    (``RunDir.recover``), whose full state resumes exactly."""
    torch.set_num_threads(1)
    config = CASES["r2d1_minatar"]
    train(config, tmp_path / "straight")
    straight = without_clocks(read_run(tmp_path / "straight").progress)

    latest = ctrl_c_in_optimize(config, tmp_path / "old", monkeypatch, at_call=15)
    checkpoint = torch.load(latest, weights_only=True)
    torch.save({k: v for k, v in checkpoint.items() if k not in ("replay", "sampler")}, latest)
    capfd.readouterr()
    train(config, tmp_path / "old")
    err = capfd.readouterr().err
    assert "resuming at 192 env steps without the replay (it refills" in err
    assert "or the envs' state (fresh episodes" in err
    old = without_clocks(read_run(tmp_path / "old").progress)
    assert read_run(tmp_path / "old").status == "complete"
    assert old["env_steps"].tolist() == straight["env_steps"].tolist()
    updates = old.set_index("env_steps")["updates"]
    assert updates[224] == updates[192] < updates[320]  # it refills 64 steps before updating again

    latest = ctrl_c_in_optimize(config, tmp_path / "crafted", monkeypatch, at_call=15)
    checkpoint = torch.load(latest, weights_only=True)
    evil = bytearray(pickle.dumps([Evil(), Evil()]))
    checkpoint["sampler"]["env"]["backend"]["envs"] = {
        resume.PICKLED: torch.frombuffer(evil, dtype=torch.uint8)
    }
    torch.save(checkpoint, latest)
    capfd.readouterr()
    train(config, tmp_path / "crafted")
    out, err = capfd.readouterr()
    assert "unpickled code ran" not in out + err
    assert "without the envs' state, which does not load" in err and "builtins.print" in err
    assert "without the replay" not in err  # the replay still resumed
    assert read_run(tmp_path / "crafted").status == "complete"

    latest = ctrl_c_in_optimize(config, tmp_path / "truncated", monkeypatch, at_call=15)
    data = latest.read_bytes()
    latest.unlink()  # a new file: previous.pt may be a hard link to latest.pt
    latest.write_bytes(data[: len(data) // 2])
    capfd.readouterr()
    train(config, tmp_path / "truncated")
    err = capfd.readouterr().err
    assert "latest.pt does not load" in err and "resuming from previous.pt at 128 env steps" in err
    assert "resuming at" not in err
    pd.testing.assert_frame_equal(without_clocks(read_run(tmp_path / "truncated").progress), straight)


def test_bool_arrays_go_into_checkpoints_eight_values_a_byte_and_come_back_exactly():
    rng = np.random.default_rng(0)
    arrays = {"obs": rng.random((7, 3, 5)) < 0.3, "reward": rng.random(7).astype(np.float32)}
    state = resume.arrays_state(arrays)
    assert state["obs"]["bits"].numel() == -(-7 * 3 * 5 // 8)
    state = torch.load(_saved(state), weights_only=True)
    restored = {"obs": np.zeros((7, 3, 5), bool), "reward": np.zeros(7, np.float32)}
    resume.load_arrays(restored, state, "replay")
    assert all(np.array_equal(restored[k], arrays[k]) for k in arrays)
    mismatch = r"replay: obs saved as bool\[7, 3, 5\], this run's is bool\[7, 3, 4\]"
    with pytest.raises(ValueError, match=mismatch):
        resume.load_arrays({"obs": np.zeros((7, 3, 4), bool), "reward": restored["reward"]}, state, "replay")


def _saved(state: dict) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_a_replay_goes_into_checkpoints_without_its_unfilled_rows_and_comes_back_exactly(monkeypatch):
    """Rows past the last one holding a nonzero byte are left out (``resume.TRIM_MIN_BYTES`` and
    more) and restored as zeros; a -0.0 in the last row counts as filled; full, small and 0-dim
    arrays go in whole; a trimmed array saved for another shape is the usual one-line error."""
    monkeypatch.setattr(resume, "TRIM_MIN_BYTES", 64)
    rng = np.random.default_rng(0)
    obs = np.zeros((50, 3, 5), bool)
    obs[:12] = rng.random((12, 3, 5)) < 0.3
    obs[11, 0, 0] = True  # row 11 is the last filled one
    reward = np.zeros(40, np.float32)
    reward[:7] = rng.random(7)
    reward[7] = -0.0  # zero as a value, not as bytes
    arrays = {
        "obs": obs,
        "reward": reward,
        "full": rng.random(30).astype(np.float32),
        "empty": np.zeros((20, 4), np.float32),
        "small": np.zeros(3, np.float32),
        "cursor": np.array(5, np.int64),
    }
    state = torch.load(_saved(resume.arrays_state(arrays)), weights_only=True)
    assert state["obs"]["shape"] == [50, 3, 5] and state["obs"]["head"]["shape"] == [12, 3, 5]
    assert state["reward"]["head"].shape == (8,)
    assert state["empty"]["head"].shape == (0, 4)
    assert all(torch.is_tensor(state[k]) for k in ("full", "small", "cursor"))
    restored = {k: np.full_like(v, 7) for k, v in arrays.items()}  # stale contents are overwritten
    resume.load_arrays(restored, state, "replay")
    for name, array in arrays.items():
        assert restored[name].tobytes() == array.tobytes(), name
    assert np.signbit(restored["reward"][7])
    mismatch = r"replay: obs saved as bool\[50, 3, 5\], this run's is bool\[60, 3, 5\]"
    with pytest.raises(ValueError, match=mismatch):
        resume.load_arrays({**restored, "obs": np.zeros((60, 3, 5), bool)}, state, "replay")
