"""bench.sb3_record (an SB3 PPO run written in this harness's run format) and the refusals of its
driver, bench.sb3_ppo_atari (its checks: bench.sb3_zoo), without Stable-Baselines3: step infos as
SB3's Monitor fills them, made by hand, stand for a run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.published import last_training_returns
from analysis.runs import load_experiment
from bench import sb3_record as rec
from bench import sb3_zoo as zoo
from bench.sb3_ppo_atari import main

REPO = Path(__file__).resolve().parents[1]
T = zoo.ZOO_PPO["n_steps"]  # vector steps per rollout
ROLLOUT = T * zoo.N_ENVS  # env steps per rollout: 1,024
INTERVAL = 2 * ROLLOUT
ROLLOUTS = 5  # rows at 2,048 and 4,096 (an empty window), the budget's partial one at 5,120

# (rollout, vector step, env) -> Monitor's episode entry: return r, length l in emulator frames.
GAMES = {
    (0, 9, 0): {"r": -21.0, "l": 3000, "t": 1.0},
    (0, 99, 5): {"r": -20.0, "l": 3500, "t": 2.0},
    (1, 49, 0): {"r": -19.0, "l": 3100, "t": 3.0},
    (4, 127, 5): {"r": 3.0, "l": 9000, "t": 4.0},
}


def infos(rollout: int, t: int) -> list[dict]:
    out = [{"lives": 3} for _ in range(zoo.N_ENVS)]
    for (k, step, env), episode in GAMES.items():
        if (k, step) == (rollout, t):
            out[env]["episode"] = episode
    return out


def diagnostics(rollout: int) -> dict:
    """SB3's logger after the update on ``rollout``: its train/ values (a learning rate to average)."""
    return {"train/learning_rate": 1e-4 * (rollout + 1), "train/value_loss": 0.5, "train/n_updates": 4}


def drive(recorder: rec.Recorder, rollouts: range, finish: bool = True) -> list[dict]:
    """SB3's order of calls over ``rollouts``: boundary, then the rollout's steps, then its end; the
    boundary after the last one (and with ``finish`` the budget's last row). Returns the rows due."""
    rows = []
    for k in rollouts:
        rows.append(recorder.boundary(k * ROLLOUT, diagnostics(k - 1) if recorder.in_rollout else None))
        recorder.rollout_start()
        for t in range(T):
            recorder.step(infos(k, t))
        recorder.rollout_end()
    k = rollouts.stop
    rows.append(recorder.boundary(k * ROLLOUT, diagnostics(k - 1)))
    if finish:
        rows.append(recorder.finish_row())
    return [row for row in rows if row is not None]


def test_rows_from_episode_infos() -> None:
    rows = drive(rec.Recorder(INTERVAL), range(ROLLOUTS))
    assert [r["env_steps"] for r in rows] == [2048, 4096, 5120]  # the last: the budget's partial window
    assert [r["frames"] for r in rows] == [4 * 2048, 4 * 4096, 4 * 5120]
    assert [r["episodes_logged"] for r in rows] == [3, 0, 1]
    assert [r["episodes"] for r in rows] == [3, 3, 4]  # cumulative, as our counters
    first, empty, last = rows
    assert first["return_mean"] == pytest.approx(-20.0)
    assert (first["return_min"], first["return_max"]) == (-21.0, -19.0)
    # Agent steps per game, per env: 10 and 100 in rollout 0; env 0's second game 118 + 50.
    assert first["length_mean"] == pytest.approx((10 + 100 + 168) / 3)
    assert first["length_frames_mean"] == pytest.approx((3000 + 3500 + 3100) / 3)
    assert math.isnan(empty["return_mean"]) and math.isnan(empty["length_mean"])
    assert last["return_mean"] == 3.0
    assert last["length_mean"] == 28 + 3 * T + T  # env 5: from step 100 of rollout 0 to the end
    # Updates: 4 epochs x 4 minibatches of 256 per rollout; the mean learning rate of the window's updates.
    assert [r["updates"] for r in rows] == [32, 64, 80]
    assert [r["samples_trained"] for r in rows] == [8192, 16384, 20480]
    assert first["sb3_learning_rate"] == pytest.approx(1.5e-4)
    assert last["sb3_learning_rate"] == pytest.approx(5e-4)
    assert math.isnan(first["sb3_approx_kl"])  # a value SB3 did not log: NaN, the column kept
    assert all(r.keys() == first.keys() for r in rows)


def test_stop_mid_rollout_rolls_back_to_the_boundary() -> None:
    recorder = rec.Recorder(INTERVAL)
    assert recorder.boundary(0, None) is None
    recorder.rollout_start()
    for t in range(T):
        recorder.step(infos(0, t))
    recorder.rollout_end()
    recorder.boundary(ROLLOUT, diagnostics(0))
    recorder.rollout_start()
    for t in range(60):  # rollout 1 stopped after its game at step 49: that game is not counted
        recorder.step(infos(1, t))
    recorder.rollback()
    state = recorder.state_dict()
    assert state["counters"]["env_steps"] == ROLLOUT
    assert state["window"]["returns"] == [-21.0, -20.0]
    resumed = rec.Recorder(INTERVAL, state=json.loads(json.dumps(state)))
    rows = drive(resumed, range(1, ROLLOUTS))
    assert [r["env_steps"] for r in rows] == [2048, 4096, 5120]
    assert rows[0]["return_mean"] == pytest.approx(-20.0) and rows[0]["episodes_logged"] == 3
    assert rows[0]["updates"] == 32


def test_zoo_schedule_and_updates() -> None:
    lr = rec.ZooLinear(2.5e-4)
    assert (lr(1.0), lr(0.75), lr(0.0)) == (2.5e-4, 0.75 * 2.5e-4, 0.0)
    assert rec.updates_per_rollout() == (16, 4096)
    kwargs = rec.ppo_kwargs(3, 10_000_000)
    assert isinstance(kwargs["clip_range"], rec.ZooLinear) and kwargs["clip_range"](0.5) == 0.05
    assert (kwargs["seed"], kwargs["device"], kwargs["n_steps"], kwargs["batch_size"]) == (3, "cpu", 128, 256)


def write_fixture_run(root: Path, seed: int = 0) -> Path:
    path = rec.sb3_run_path(root, "exp", "pong", seed)
    config = rec.run_config(
        "pong", seed, ROLLOUTS * ROLLOUT, 10_000_000, 1, INTERVAL, "2.9.2", {"ppo.gamma": 0.99}
    )
    run, checkpoint = rec.open_record(path, config, seed)
    assert checkpoint is None
    recorder = rec.Recorder(INTERVAL)
    rec.write_rows(run, drive(recorder, range(ROLLOUTS)))
    run.save_checkpoint(rec.checkpoint_state(b"PK-sb3-zip", recorder, {}))
    run.set_status("complete")
    run.close()
    return path


def test_fixture_run_reads_as_a_complete_run_of_the_arm(tmp_path: Path) -> None:
    write_fixture_run(tmp_path)
    exp = load_experiment(tmp_path / "exp")
    assert exp.runs[["arm", "env", "seed", "status"]].values.tolist() == [
        ["sb3_ppo_atari_zoo", "pong", 0, "complete"]
    ]
    assert exp.skipped.empty
    keys = dict(zip(exp.config.key, exp.config.value))
    assert keys["runner.n_steps"] == 5120 and keys["sb3.gym_id"] == "PongNoFrameskip-v4"
    assert keys["algo_config.learning_rate.start"] == 2.5e-4 and keys["algo"] == "sb3_ppo"
    scores = last_training_returns(exp)
    # All 4 games: the rows' means weighted by their games, (3 x -20 + 1 x 3) / 4.
    assert scores[["frames", "score", "episodes"]].values.tolist() == [[4 * 5120, -14.25, 4]]
    assert exp.metadata["resumes"].tolist() == ["[]"] and exp.metadata["seeds.seed"].tolist() == [0]


def test_resume_keeps_the_first_start_and_lists_resumes(tmp_path: Path) -> None:
    path = rec.sb3_run_path(tmp_path, "exp", "pong", 1)
    config = rec.run_config("pong", 1, ROLLOUTS * ROLLOUT, 10_000_000, 1, INTERVAL, "2.9.2", {})
    run, _ = rec.open_record(path, config, 1)
    recorder = rec.Recorder(INTERVAL)
    rec.write_rows(run, drive(recorder, range(3), finish=False))  # the row at 2,048 ...
    # ... a checkpoint at the boundary after it, then a row past it that a kill left behind.
    run.save_checkpoint(rec.checkpoint_state(b"zip", recorder, {}))
    run.append_progress({**drive(rec.Recorder(INTERVAL), range(ROLLOUTS))[1]})
    run.close()  # killed: status stays running
    metadata = json.loads((path / "metadata.json").read_text())
    metadata["start_time"] = "2000-01-01T00:00:00+00:00"  # a first start long ago
    (path / "metadata.json").write_text(json.dumps(metadata))

    for n in (1, 2):
        run, checkpoint = rec.open_record(path, config, 1)
        run.close()
        assert checkpoint is not None and bytes(rec.sb3_zip_of(checkpoint).getvalue()) == b"zip"
        assert rec.recorder_state(checkpoint)["counters"]["env_steps"] == 3 * ROLLOUT
        metadata = json.loads((path / "metadata.json").read_text())
        assert metadata["start_time"] == "2000-01-01T00:00:00+00:00"
        assert [(r["env_steps"], r["frames"], r["envs_restarted"]) for r in metadata["resumes"]] == [
            (3 * ROLLOUT, 4 * 3 * ROLLOUT, True)
        ] * n
    # The row logged after the checkpoint was cut: the resumed run logs it again.
    lines = (path / "progress.csv").read_text().splitlines()
    assert [line.split(",")[1] for line in lines[1:]] == ["2048"]


def test_resume_refuses_another_config(tmp_path: Path) -> None:
    path = write_fixture_run(tmp_path)
    other = rec.run_config(
        "pong", 0, ROLLOUTS * ROLLOUT, 10_000_000, 2, INTERVAL, "2.9.2", {"ppo.gamma": 0.99}
    )
    assert "runner.torch_threads" in rec.stored_config_differs(path, other)
    with pytest.raises(ValueError, match="runner.torch_threads"):
        rec.open_record(path, other, 0)


def refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> str:
    rc = main(["--exp", "e", "--game", "pong", "--root", str(tmp_path), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert not (tmp_path / "e").exists()
    return err[0]


@pytest.mark.parametrize("seed", [200, 250, 299])
def test_reserved_seeds_refused(seed: int, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "reserved" in refusal(capsys, tmp_path, "--seed", str(seed))


def test_seeds_next_to_the_reserved_ones_pass() -> None:
    assert (zoo.check_seed(199), zoo.check_seed(300)) == (199, 300)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--seed", "zero"], "invalid int value"),
        (["--seed", "0", "--steps", "0"], "--steps 0"),
        (["--seed", "0", "--steps", "20000000"], "past --anneal-steps"),
        (["--seed", "0", "--threads", "0"], "--threads 0"),
        (["--seed", "0", "--bogus"], "unrecognized arguments"),
        (["--seed", "0", "--game", "pong!"], "pong!"),
        (["--seed", "0", "--game", "no_such_game"], "NoSuchGameNoFrameskip-v4"),
    ],
)
def test_bad_argument_is_one_line(args, says, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert says in refusal(capsys, tmp_path, *args)


def test_cli_refuses_before_importing_sb3(tmp_path: Path) -> None:
    code = (
        "import sys; from bench.sb3_ppo_atari import main; "
        f"rc = main(['--exp', 'e', '--game', 'Pong', '--seed', '201', '--root', {str(tmp_path)!r}]); "
        "assert 'stable_baselines3' not in sys.modules; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_game_names() -> None:
    assert [zoo.check_game(g) for g in ("pong", "Pong", "SpaceInvaders")] == [
        "pong",
        "pong",
        "space_invaders",
    ]
    assert zoo.gym_id("space_invaders") == "SpaceInvadersNoFrameskip-v4"
