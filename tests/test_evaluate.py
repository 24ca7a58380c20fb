"""``rlrepro evaluate RUN``: a tiny trained CartPole run and a MinAtar run played from their final
checkpoints, with videos; bad runs are one line and exit 2 with nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest

from algorithms.rundir import CHECKPOINT_DIR, CONFIG_FILE

REPO = Path(__file__).resolve().parents[1]


def repro(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "repro", *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )


def trained(root: Path, setting: str, env: str, steps: int) -> Path:
    """One smoke-profile run of ``setting`` on ``env``, ``steps`` env steps: its run directory."""
    budget = f"runner.n_steps={steps}"
    done = repro(
        "run", setting, "--env", env, "--seeds", "1", "--profile", "smoke", "--set", budget,
        "--root", str(root), "--exp", "exp", "--no-estimate", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    [run] = (root / "exp").glob(f"*/{env}/seed0")
    return run


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    return trained(tmp_path_factory.mktemp("cartpole"), "ppo_cartpole_zoo", "CartPole-v1", 2048)


@pytest.fixture(scope="module")
def minatar(tmp_path_factory) -> Path:
    return trained(tmp_path_factory.mktemp("minatar"), "dqn_minatar", "minatar_breakout", 1500)


@pytest.mark.parametrize("which", ["cartpole", "minatar"])
def test_a_trained_run_is_played_from_its_checkpoint_with_a_video_per_episode(which, request, tmp_path):
    from repro.evaluate import evaluate

    run = request.getfixturevalue(which)
    found = evaluate(run, 2, video=tmp_path / "video", max_frames=5_000)
    assert len(found["returns"]) == 2 and found["env_steps"] > 0
    assert [p.name for p in found["videos"]] == ["episode0.gif", "episode1.gif"]
    # Each video is its own whole episode: its first frame (the reset) and one frame per step.
    assert found["frames"] == [length + 1 for length in found["lengths"]]
    for path in found["videos"]:
        frames = iio.imread(path)
        assert path.stat().st_size > 0 and frames.ndim == 4 and frames.shape[0] > 1 and frames.shape[-1] == 3


def test_the_command_prints_each_return_the_mean_and_its_interval(cartpole, tmp_path):
    done = repro(
        "evaluate", str(cartpole), "--episodes", "3", "--video", str(tmp_path / "v"), "--max-frames", "20"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["episode 0", "episode 1", "episode 2"]
    assert "mean return " in lines[3] and "(95% t interval) over 3 episode(s)" in lines[3]
    assert lines[4:] == [f"video: {tmp_path / 'v' / f'episode{k}.gif'}" for k in range(3)]
    assert all(iio.imread(tmp_path / "v" / f"episode{k}.gif").shape[0] <= 20 for k in range(3))


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def _refused(run: Path, tmp_path: Path, *options: str) -> str:
    video = tmp_path / "video"
    done = repro("evaluate", str(run), "--video", str(video), *options)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not done.stdout, done.stderr[-2000:]
    assert not video.exists()
    return done.stderr


def test_bad_runs_are_one_line_and_exit_2(cartpole, minatar, tmp_path):
    assert "does not exist" in _refused(tmp_path / "nothing", tmp_path)
    no_checkpoint = _copy(cartpole, tmp_path / "a")
    shutil.rmtree(no_checkpoint / CHECKPOINT_DIR)
    assert "no checkpoint" in _refused(no_checkpoint, tmp_path)
    foreign = _copy(cartpole, tmp_path / "b")
    (foreign / CONFIG_FILE).write_text(json.dumps({"policy": "MlpPolicy", "n_steps": 128}))
    assert "not a config this harness can run" in _refused(foreign, tmp_path)
    other_agent = _copy(minatar, tmp_path / "c")
    shutil.copy(cartpole / CHECKPOINT_DIR / "latest.pt", other_agent / CHECKPOINT_DIR / "latest.pt")
    assert "does not fit the run's dqn agent" in _refused(other_agent, tmp_path)
    assert "--episodes must be at least 1" in _refused(cartpole, tmp_path, "--episodes", "0")


def test_the_report_embeds_a_clip_per_arm_with_a_checkpoint_and_names_the_others(cartpole, tmp_path):
    from reports.build import build_report

    experiment = cartpole.parents[2]
    page = build_report(experiment, out=tmp_path / "with.html", reps=100, figures_dir=tmp_path / "figures")
    html = page.read_text()
    assert (
        html.count('src="data:image/gif;base64,') == 1 and 'id="clip-ppo_cartpole_zoo_n_steps-2048"' in html
    )
    assert (tmp_path / "figures" / "clip-ppo_cartpole_zoo_n_steps-2048.gif").stat().st_size > 0
    bare = _copy(experiment, tmp_path / "bare")
    for checkpoints in bare.glob(f"*/*/seed*/{CHECKPOINT_DIR}"):
        shutil.rmtree(checkpoints)
    assert 'id="watch"' not in build_report(bare, out=tmp_path / "without.html", reps=100).read_text()


def test_a_peer_arm_gets_no_clip_and_no_error(cartpole, tmp_path):
    """A peer arm's runs (another program's, as SB3's in the Atari experiment) are not played: before,
    the report ran evaluate on them and showed its error ('unknown key sb3')."""
    from reports.build import build_report

    experiment = shutil.copytree(cartpole.parents[2], tmp_path / "exp")
    shutil.copytree(experiment / cartpole.parents[1].name, experiment / "peer")
    record = json.loads((experiment / "plan.json").read_text())
    record["plans"][0]["peers"] = ["peer"]
    (experiment / "plan.json").write_text(json.dumps(record))
    html = build_report(experiment, out=tmp_path / "page.html", reps=100).read_text()
    assert html.count('src="data:image/gif;base64,') == 1 and 'id="clip-peer"' not in html
    assert "peer: a peer arm, run by another program, so no clip" in html
