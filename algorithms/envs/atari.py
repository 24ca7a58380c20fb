"""Atari through ale-py, two backends with one preprocessing protocol.

* ``NativeAtariVecEnv`` wraps ale-py's ``AtariVectorEnv``: C++ environments stepped by a thread
  pool, preprocessing done in C++ (the fast path).
* ``AtariProtocol`` is the same preprocessing as a gymnasium wrapper over one ``ALE/<Game>-v5``
  env with ``frameskip=1``, written in numpy (the reference path; ``GymnasiumVecEnv`` steps B of
  them in a Python loop). ``gymnasium.wrappers.AtariPreprocessing`` would do, but it needs OpenCV,
  which this project does not install; ``area_resize`` reproduces OpenCV's ``INTER_AREA``.

The protocol (Mnih et al. 2015, "Methods"; R2D2 Table 3): each env step repeats the action for
``frameskip`` frames and returns the pixel-wise max of the last two grayscale frames (Atari
sprites flicker between frames), area-resampled to 84x84; the last ``frame_stack`` such frames are
stacked oldest first, zero-padded after a reset (as ale-py does); fewer than ``noop_max`` no-op
frames start each episode; episodes are truncated after ``max_episode_frames`` frames. Rewards come out
raw; clipping and life-loss handling are done once for all backends in ``VecEnv``.
"""

from __future__ import annotations

import functools

import ale_py
import gymnasium as gym
import numpy as np
from ale_py.vector_env import AtariVectorEnv

from algorithms.envs.base import RawStep, VecEnv
from algorithms.envs.config import EnvConfig

ATARI_SCREEN_SHAPE = (210, 160)
NOOP_ACTION = 0  # NOOP is action 0 of every ALE action set, minimal or full


@functools.cache
def area_resize_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights of OpenCV's ``INTER_AREA`` downsampling along one axis.

    Output pixel ``d`` averages the source interval ``[d * s, (d + 1) * s)`` with ``s = in / out``;
    partially covered source pixels get fractional weights. Follows OpenCV's
    ``computeResizeAreaTab`` (modules/imgproc/src/resize.cpp), including its 1e-3 tolerance and
    float32 weights, so that results round the same way. Returns ``index, weight`` of shape
    ``[out_size, K]``; unused taps have weight 0 (adding ``0 * x`` leaves float sums unchanged).
    """
    if out_size > in_size:
        raise ValueError(f"area_resize_taps: INTER_AREA here only downsamples, got {in_size} -> {out_size}")
    scale = in_size / out_size
    taps: list[list[tuple[int, float]]] = []
    for d in range(out_size):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, in_size - f1)
        s1 = int(np.ceil(f1))
        s2 = min(int(np.floor(f2)), in_size - 1)
        s1 = min(s1, s2)
        row: list[tuple[int, float]] = []
        if s1 - f1 > 1e-3:
            row.append((s1 - 1, (s1 - f1) / cell))
        row.extend((s, 1.0 / cell) for s in range(s1, s2))
        if f2 - s2 > 1e-3:
            row.append((s2, min(f2 - s2, 1.0, cell) / cell))
        taps.append(row)
    width = max(len(row) for row in taps)
    index = np.zeros((out_size, width), dtype=np.intp)
    weight = np.zeros((out_size, width), dtype=np.float32)
    for d, row in enumerate(taps):
        for k, (s, w) in enumerate(row):
            index[d, k] = s
            weight[d, k] = w
    return index, weight


def area_resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize a uint8 ``[H, W]`` frame to ``[height, width]`` as ``cv2.resize(..., INTER_AREA)`` does.

    OpenCV sums each source row horizontally in float32 (taps in order), then the weighted rows
    vertically (in order), and rounds half to even; the same order of float32 operations is used
    here.
    """
    if frame.ndim != 2 or frame.dtype != np.uint8:
        raise ValueError(f"area_resize: expected a uint8 [H, W] frame, got {frame.dtype} {frame.shape}")
    x_index, x_weight = area_resize_taps(frame.shape[1], width)
    y_index, y_weight = area_resize_taps(frame.shape[0], height)
    src = frame.astype(np.float32)
    rows = np.zeros((frame.shape[0], width), dtype=np.float32)  # [H, width]
    for k in range(x_index.shape[1]):
        rows += src[:, x_index[:, k]] * x_weight[:, k]
    out = np.zeros((height, width), dtype=np.float32)
    for k in range(y_index.shape[1]):
        out += rows[y_index[:, k]] * y_weight[:, k, None]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def gymnasium_atari_id(game: str) -> str:
    """The ``ALE/<Game>-v5`` gymnasium id of a snake_case ALE game (``"pong"`` -> ``"ALE/Pong-v5"``)."""
    gym.register_envs(ale_py)
    for env_id, spec in gym.envs.registry.items():
        if env_id.startswith("ALE/") and env_id.endswith("-v5") and spec.kwargs.get("game") == game:
            return env_id
    raise ValueError(f"EnvConfig.id: Atari game {game!r} has no ALE/*-v5 gymnasium id; use backend='native'")


class AtariProtocol(gym.Wrapper):
    """Frame skip with max-pool, grayscale area-resize, FIRE and no-op starts, frame cap; one env.

    Wraps an ``ALE/<Game>-v5`` env made with ``frameskip=1`` and no frame cap of its own, and
    returns ``[size, size]`` uint8 frames. Mirrors ale-py 0.12's C++ ``PreprocessedAtariEnv``
    (src/ale/vector/preprocessed_env.hpp) step for step:

    * reset: optional FIRE, then ``k - fire`` no-ops with ``k`` uniform in ``0..noop_max-1``; the
      count comes from the env's seeded ``np_random`` here and from ale-py's own C++ generator
      there, so with ``noop_max > 0`` the two backends start episodes differently;
    * step: at a game over, or after ``max_episode_frames`` frames since the reset (no-ops not
      counted), the frame loop stops *before* grabbing that frame, and frames are pooled in place;
      so the last observation of an episode that ends inside a frame skip mixes in the previous
      step's frames. This is ale-py's behaviour, kept so that the backends agree exactly.
    """

    def __init__(
        self,
        env: gym.Env,
        frameskip: int,
        frame_size: int,
        noop_max: int,
        fire_reset: bool,
        max_episode_frames: int,
    ) -> None:
        super().__init__(env)
        self._ale = env.unwrapped.ale
        self._frameskip = frameskip
        self._frame_size = frame_size
        self._noop_max = noop_max
        self._max_episode_frames = max_episode_frames
        meanings = env.unwrapped.get_action_meanings()
        self._fire_action = meanings.index("FIRE") if fire_reset and "FIRE" in meanings else None
        # The last two raw frames of a step: [1] the second to last, [0] the last (ale-py's layout).
        self._screens = np.zeros((2, *ATARI_SCREEN_SHAPE), dtype=np.uint8)
        self._episode_frames = 0
        self.observation_space = gym.spaces.Box(0, 255, (frame_size, frame_size), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        _, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            # ale-py's vector env seeds ALE with the seed itself (AtariEnv derives another one from
            # it): do the same, so that sticky actions draw the same numbers in both backends.
            self._ale.setInt("random_seed", np.int32(seed))
            self.env.unwrapped.load_game()
            self._ale.reset_game()
        if self._fire_action is not None:
            _, _, _, _, info = self.env.step(self._fire_action)
        noops = int(self.env.unwrapped.np_random.integers(0, self._noop_max)) if self._noop_max > 0 else 0
        for _ in range(noops - (self._fire_action is not None)):
            _, _, terminated, _, info = self.env.step(NOOP_ACTION)
            if terminated:
                _, info = self.env.reset()
        self._ale.getScreenGrayscale(self._screens[0])
        self._screens[1] = 0
        self._episode_frames = 0
        return self._frame(), info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        total_reward = 0.0
        terminated = truncated = False
        info: dict = {}
        for t in range(self._frameskip):
            _, reward, terminated, _, info = self.env.step(action)
            total_reward += float(reward)
            self._episode_frames += 1
            truncated = not terminated and self._episode_frames >= self._max_episode_frames
            if terminated or truncated:
                break
            if t == self._frameskip - 2:
                self._ale.getScreenGrayscale(self._screens[1])
            elif t == self._frameskip - 1:
                self._ale.getScreenGrayscale(self._screens[0])
        return self._frame(), total_reward, terminated, truncated, info

    def _frame(self) -> np.ndarray:
        # Pooled in place into screen 0, as ale-py does: a step cut short by a game over or the
        # frame cap pools the previous step's pooled frame with whatever it grabbed before the cut.
        np.maximum(self._screens[0], self._screens[1], out=self._screens[0])
        return area_resize(self._screens[0], self._frame_size, self._frame_size)


def make_gymnasium_atari(config: EnvConfig) -> gym.Env:
    """One reference-path Atari env: ``ALE/<Game>-v5`` + ``AtariProtocol`` + zero-padded frame stack."""
    env = gym.make(
        gymnasium_atari_id(config.id),
        obs_type="grayscale",
        frameskip=1,
        repeat_action_probability=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        max_num_frames_per_episode=0,  # no cap inside ALE: AtariProtocol counts frames as ale-py does
        disable_env_checker=True,
    )
    env = AtariProtocol(
        env,
        config.frameskip,
        config.frame_size,
        config.noop_max,
        config.fire_reset,
        config.max_episode_frames,
    )
    return gym.wrappers.FrameStackObservation(env, config.frame_stack, padding_type="zero")


def ale_vector_env(config: EnvConfig, num_envs: int) -> AtariVectorEnv:
    """ale-py's vector env with ``config``'s preprocessing, as ``NativeAtariVecEnv`` runs it: raw
    rewards, no life-loss terminals and next-step autoreset (``NativeAtariVecEnv`` handles all three)."""
    return AtariVectorEnv(
        config.id,
        num_envs,
        num_threads=config.num_threads,
        max_num_frames_per_episode=config.max_episode_frames,
        repeat_action_probability=config.repeat_action_probability,
        full_action_space=config.full_action_space,
        autoreset_mode="NextStep",
        img_height=config.frame_size,
        img_width=config.frame_size,
        grayscale=True,
        stack_num=config.frame_stack,
        frameskip=config.frameskip,
        maxpool=True,
        noop_max=config.noop_max,
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
        use_fire_reset=config.fire_reset,
    )


class NativeAtariVecEnv(VecEnv):
    """ale-py's threaded ``AtariVectorEnv`` behind Contract 1.

    ale-py is asked for raw rewards and no life-loss terminals (both are handled in ``VecEnv``) and
    for next-step autoreset, so that the info of an ending step still describes the ended episode
    (its lives); the ended envs are then reset here at once with a reset mask, which gives
    same-step autoreset without ale-py overwriting the final observation's info.
    """

    def __init__(self, config: EnvConfig, num_envs: int, seeds: np.ndarray) -> None:
        super().__init__(num_envs, config.frameskip, config.clip_rewards, config.episodic_life)
        self._env = ale_vector_env(config, num_envs)
        self._seeds = seeds.astype(np.int64)
        self._paddle_strength = np.ones(num_envs, dtype=np.float32)  # full strength: discrete actions
        self._seeded = False
        self._lives = np.zeros(num_envs, dtype=np.int32)
        self.observation_space = self._env.single_observation_space
        self.action_space = self._env.single_action_space

    def _reset(self) -> np.ndarray:
        # Seeds apply at the first reset only; later resets continue each env's random stream.
        seed = None if self._seeded else self._seeds
        self._seeded = True
        obs, info = self._env.reset(seed=seed)
        self._lives = info["lives"]
        return obs

    def _send(self, actions: np.ndarray) -> None:
        # ale-py's threads step the envs while the caller goes on; recv waits for them. Straight to
        # its C++ interface: AtariVectorEnv.send's checks and its new np.ones of paddle strengths
        # were a visible share of the serial sampler's main-thread time on every step
        # (docs/results/core_measurements.md, envs/atari.py).
        actions = np.ascontiguousarray(actions, dtype=np.int64).reshape(self.num_envs)
        self._env.ale.send(actions, self._paddle_strength)

    def _receive(self, actions: np.ndarray) -> RawStep:
        # ale-py returns new arrays of the dtypes used here (uint8, int32 rewards and lives, bool).
        obs, reward, terminated, truncated, info = self._env.recv()
        lives = info["lives"]
        life_loss = lives < self._lives
        done = terminated | truncated
        final_obs = obs
        if np.count_nonzero(done):
            final_obs = obs.copy()
            reset_obs, reset_info = self._env.reset(options={"reset_mask": done})
            obs[done] = reset_obs[done]
            lives[done] = reset_info["lives"][done]
        self._lives = lives
        return RawStep(
            observation=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_observation=final_obs,
            life_loss=life_loss,
        )

    def close(self) -> None:
        self._env.close()
