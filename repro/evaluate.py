"""``rlrepro evaluate RUN``: watch a trained agent. Loads a run's final checkpoint (``latest.pt``, or
``--checkpoint previous|PATH``), plays ``--episodes`` episodes in the agent's evaluation mode (the
run's own evaluation policy: greedy, or its evaluation epsilon) on the run's own env settings, with
the sampler's own evaluation loop (``algorithms.samplers.evaluation.EvalSampler``, capped at the
run's ``sampler.eval_max_steps``), and prints each return, the mean and a 95% t interval.

``--video DIR`` records each episode as an animated GIF (``DIR/episode<k>.gif``, imageio): Atari
from the emulator's RGB screen (the run's env on gymnasium's ALE env, the reference path of the same
protocol, since ale-py's native vector env has no single env to watch), MinAtar from its channels
coloured as MinAtar's own display colours them, other gymnasium envs from their ``rgb_array``
render. A run without a checkpoint, a config.json this harness did not write, or a checkpoint that
does not fit the run's agent is one line on stderr and exit 2, with nothing written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.configs import ConfigError
from algorithms.rundir import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    CONFIG_FILE,
    PREVIOUS_CHECKPOINT_FILE,
    RunFileNotRegular,
    read_regular,
)
from protocol.limits import MAX_EPISODES, MAX_EPISODES_WHY, Limit, check_limit, gib

# Frames kept per episode in a video: an Atari episode can run 27,000 steps, which no GIF should hold.
DEFAULT_MAX_FRAMES = 2_000
# The RGB screen the recorder keeps of an Atari frame (210 x 160 pixels, 3 bytes each).
ATARI_FRAME_BYTES = 210 * 160 * 3
# An Atari episode's longest: 108,000 frames at frameskip 4 (Machado et al. 2018, the 30-minute cap),
# one recorded frame per step.
MAX_FRAMES_LIMIT = Limit(
    "--max-frames", 27_000, "the longest Atari episode, 108,000 frames at frameskip 4",
    lambda n: f"a video would hold {gib(n * ATARI_FRAME_BYTES)} of Atari screens per episode",
)  # fmt: skip
EPISODES_LIMIT = Limit(
    "--episodes", MAX_EPISODES, MAX_EPISODES_WHY,
    lambda n: f"{n:,} episodes are played in full before a line is printed, and with --video held in memory",
)  # fmt: skip
# MinAtar cells are one pixel; a video scales each to a square this many pixels wide.
MINATAR_CELL_PX = 16
FRAME_MS = 50


def checkpoint_path(run: Path, which: str) -> Path:
    """``latest`` (the final checkpoint of a finished run), ``previous``, or a path to a ``.pt``."""
    named = {"latest": CHECKPOINT_FILE, "previous": PREVIOUS_CHECKPOINT_FILE}
    return run / CHECKPOINT_DIR / named[which] if which in named else Path(which)


def load_run(run: Path, which: str = "latest") -> tuple[Any, dict[str, Any]]:
    """``(TrainConfig, checkpoint)`` of the run at ``run``; ``ConfigError`` (one line) when the run,
    its config or its checkpoint is missing or not this harness's."""
    import torch

    from algorithms.run_config import config_from_dict
    from algorithms.rundir import verify_checkpoint

    if not run.is_dir():
        raise ConfigError(f"run directory {run} does not exist")
    try:
        stored = json.loads(read_regular(run / CONFIG_FILE))
    except FileNotFoundError:
        raise ConfigError(f"{run}: no {CONFIG_FILE}: not a run directory of this harness") from None
    except RunFileNotRegular:  # its own line, naming what the file is
        raise
    except (OSError, ValueError) as e:
        raise ConfigError(f"{run / CONFIG_FILE}: unreadable ({type(e).__name__})") from None
    try:
        config = config_from_dict(stored)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        why = " ".join(str(e).split())[:200]
        raise ConfigError(f"{run / CONFIG_FILE}: not a config this harness can run ({why})") from None
    path = checkpoint_path(run, which)
    if not path.is_file():
        raise ConfigError(
            f"{run}: no checkpoint {path} (a run keeps its checkpoints unless they were removed)"
        )
    try:
        verify_checkpoint(path)
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        agent_state = checkpoint["agent"]
    except Exception as e:  # any way a damaged or foreign file fails to load
        raise ConfigError(f"{path}: does not load as a checkpoint ({type(e).__name__})") from None
    return config, {
        "agent": agent_state,
        "env_steps": int(checkpoint.get("counters", {}).get("env_steps", 0)),
    }


def build_agent(config: Any, agent_state: dict[str, Any], where: Path) -> Any:
    """The run's agent on the CPU with the checkpoint's parameters; ``ConfigError`` when they do not fit."""
    import torch

    from algorithms.runners.common import build_run_agent

    agent = build_run_agent(config, torch.device("cpu"))
    try:
        agent.load_state_dict(agent_state)
    except (KeyError, RuntimeError, ValueError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ConfigError(f"{where}: does not fit the run's {config.algo} agent ({detail})") from None
    return agent


def minatar_frame(observation: np.ndarray) -> np.ndarray:
    """A MinAtar observation ``[channels, h, w]`` as RGB ``[h * 16, w * 16, 3]`` uint8: each cell
    coloured by its highest set channel on the cubehelix palette, black where none is, as MinAtar's
    ``Environment.display_state`` colours it."""
    from matplotlib import colormaps

    channels = observation.shape[0]
    palette = np.vstack([[0.0, 0.0, 0.0], colormaps["cubehelix"](np.linspace(0, 1, channels))[:, :3]])
    index = np.max(observation.astype(int) * np.arange(1, channels + 1)[:, None, None], axis=0)
    rgb = (palette[index] * 255).astype(np.uint8)
    return np.repeat(np.repeat(rgb, MINATAR_CELL_PX, axis=0), MINATAR_CELL_PX, axis=1)


class FrameRecorder:
    """Wraps one single env (``make_vec_env(wrap=...)``) and keeps a frame after its reset and each
    step, per episode, up to ``max_frames`` an episode."""

    def __init__(self, kind: str, max_frames: int) -> None:
        self.kind = kind
        self.max_frames = max_frames
        self.episodes: list[list[np.ndarray]] = []
        self.fresh = False  # no step since the last reset

    def __call__(self, env: Any) -> Any:
        import gymnasium as gym

        recorder = self
        if kind_renders(self.kind):
            env.unwrapped.render_mode = "rgb_array"

        class Recording(gym.Wrapper):
            def reset(self, **kwargs: Any) -> Any:
                observation, info = self.env.reset(**kwargs)
                # The vector env resets an ended episode at once (Contract 1's same-step autoreset),
                # and the evaluation's next round resets again before any step: that second reset
                # starts the episode, so it replaces the first's frame.
                if recorder.episodes and recorder.fresh:
                    recorder.episodes.pop()
                recorder.episodes.append([])
                recorder.fresh = True
                recorder.keep(self.env, observation)
                return observation, info

            def step(self, action: Any) -> Any:
                out = self.env.step(action)
                recorder.fresh = False
                recorder.keep(self.env, out[0])
                return out

        return Recording(env)

    def keep(self, env: Any, observation: np.ndarray) -> None:
        frames = self.episodes[-1]
        if len(frames) >= self.max_frames:
            return
        if self.kind == "minatar":
            frames.append(minatar_frame(np.asarray(observation)))
        elif self.kind == "atari":
            frames.append(env.unwrapped.ale.getScreenRGB())
        else:
            frames.append(np.asarray(env.unwrapped.render()))


def kind_renders(kind: str) -> bool:
    """Whether the env draws its own frames (gymnasium's ``rgb_array``): all but MinAtar and Atari."""
    return kind not in ("minatar", "atari")


def t_interval(returns: list[float]) -> tuple[float, float]:
    """A 95% t interval of the mean return (NaN with one episode)."""
    from scipy import stats

    if len(returns) < 2:
        return math.nan, math.nan
    sem = stats.sem(returns)
    if sem == 0:
        return float(np.mean(returns)), float(np.mean(returns))
    low, high = stats.t.interval(0.95, len(returns) - 1, loc=np.mean(returns), scale=sem)
    return float(low), float(high)


def video_path(video: Path, k: int) -> Path:
    """Where ``--video DIR`` records episode ``k``."""
    return video / f"episode{k}.gif"


def write_gif(path: Path, frames: list[np.ndarray]) -> None:
    """An animated GIF of ``frames`` written whole or not at all (``atomic_write_bytes``)."""
    import io

    import imageio.v3 as iio

    from algorithms.rundir import atomic_write_bytes

    buffer = io.BytesIO()
    iio.imwrite(buffer, np.stack(frames), extension=".gif", duration=FRAME_MS, loop=0)
    atomic_write_bytes(path, buffer.getvalue())


def evaluate(run: Path, episodes: int, which: str = "latest", video: Path | None = None,
             seed: int | None = None, max_frames: int = DEFAULT_MAX_FRAMES) -> dict[str, Any]:  # fmt: skip
    """Play ``episodes`` evaluation episodes of the run's agent (module doc); with ``video`` write
        one GIF per episode there. Returns ``{"returns", "lengths", "env_steps", "videos", "frames"}``
    (``frames``: the frames each video holds, before the GIF writer merges repeated ones)."""
    from algorithms.samplers.evaluation import EvalSampler

    config, checkpoint = load_run(run, which)
    agent = build_agent(config, checkpoint["agent"], checkpoint_path(run, which))
    env_config = config.env
    recorder = None
    if video is not None:
        if env_config.native_atari:
            env_config = dataclasses.replace(env_config, backend="gymnasium")
        recorder = FrameRecorder(env_config.kind, max_frames)
    sampler = EvalSampler(
        env_config, agent, n_envs=1, seed=config.runner.seed if seed is None else seed,
        max_steps=config.sampler.eval_max_steps, wrap=recorder,
    )  # fmt: skip
    try:
        played = sampler.evaluate(episodes, checkpoint["env_steps"])
    finally:
        sampler.close()
    videos, frames_kept = [], []
    if recorder is not None:
        video.mkdir(parents=True, exist_ok=True)
        # The final episode's autoreset left a list of one frame after it.
        for k, frames in enumerate(recorder.episodes[: len(played)]):
            path = video_path(video, k)
            write_gif(path, frames)
            videos.append(path)
            frames_kept.append(len(frames))
    return {
        "returns": [e["return"] for e in played],
        "lengths": [e["length"] for e in played],
        "env_steps": checkpoint["env_steps"],
        "videos": videos,
        "frames": frames_kept,
    }


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {args.episodes}")
    if args.max_frames < 1:
        raise ConfigError(f"--max-frames must be at least 1, got {args.max_frames}")
    check_limit(EPISODES_LIMIT, args.episodes)
    check_limit(MAX_FRAMES_LIMIT, args.max_frames)
    run = Path(args.run)
    video = Path(args.video) if args.video else None
    if video is not None:
        from algorithms.rundir import check_output

        for k in range(args.episodes):
            check_output(video_path(video, k))
    found = evaluate(run, args.episodes, args.checkpoint, video, args.seed, args.max_frames)
    returns = found["returns"]
    for k, (ret, length) in enumerate(zip(returns, found["lengths"])):
        print(f"episode {k}: return {ret:.4g}, {length} steps")
    low, high = t_interval(returns)
    interval = f" [{low:.4g}, {high:.4g}] (95% t interval)" if not math.isnan(low) else ""
    print(
        f"{run}: mean return {np.mean(returns):.4g}{interval} over {len(returns)} episode(s), "
        f"checkpoint at {found['env_steps']:,} env steps"
    )
    for path in found["videos"]:
        print(f"video: {path}")
    sys.stdout.flush()
    return 0
