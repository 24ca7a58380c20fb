"""How a replay stores observations: whole, or as single Atari frames. A part of every storage;
``observations_for`` picks one from an example observation.

Both kinds live in the storage's ring of R rows x B envs (``ring.StepRing``) and answer the same
calls, so transition and sequence storage take either one. Reads take flat indices
``row * B + env`` (the storages' item numbering), which index the contiguous [R, B, ...] arrays
through flat views: one ``take`` per field instead of 2-d fancy indexing.

* :class:`FullObservations` stores each observation as given, plus each step's
  ``final_observation`` (Contract 1), so a time-limit step can bootstrap from the true last
  observation. Memory: 2 x observation bytes per step; meant for vector observations.
* :class:`FrameObservations` stores only the newest 84x84 frame of each stacked observation, once,
  and rebuilds the stack on sampling from the frames of the previous ``frame_stack - 1`` rows of the
  same env. Frames from before an episode start are replaced by zeros, which is what the env gives
  (``algorithms/envs/atari.py``: stacks are zero-padded after a reset), so the rebuilt stacks equal
  the observations written, also across the ring's wrap-around. The final observation of a
  truncated episode is not kept (it would cost a frame per episode end in a separate store); see
  ``transitions.py`` for how a time-limit step is handled instead. Memory: H x W bytes per step.
"""

from __future__ import annotations

import numpy as np

from algorithms.arrays import NamedArrays, buffer_from_example


def _alloc(example: np.ndarray, shape: tuple[int, ...], shared: bool) -> np.ndarray:
    buf = buffer_from_example(example, shape, shared=shared)
    return buf.numpy() if shared else buf


class FullObservations:
    """Observations and final observations stored whole."""

    lookback = 0  # rows before a step needed to rebuild its observation
    keeps_final_observation = True

    def allocate(self, example: np.ndarray, rows: int, num_envs: int, shared: bool) -> None:
        """``example``: one observation [*obs]."""
        self._observation = _alloc(example, (rows, num_envs), shared)
        self._final = _alloc(example, (rows, num_envs), shared)
        self._observation_flat = self._observation.reshape(rows * num_envs, *example.shape)
        self._final_flat = self._final.reshape(rows * num_envs, *example.shape)

    @property
    def nbytes(self) -> int:
        return self._observation.nbytes + self._final.nbytes

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"observation": self._observation, "final_observation": self._final}

    def write(self, positions: slice | np.ndarray, samples: NamedArrays) -> None:
        """Store ``observation`` and ``final_observation`` [T, B, *obs] at ring rows ``positions`` [T]."""
        self._observation[positions] = np.asarray(samples.observation)
        self._final[positions] = np.asarray(samples.final_observation)

    def gather(self, index: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
        """Observations at flat indices ``index`` [n] -> [n, *obs]."""
        return self._observation_flat.take(index, axis=0)

    def gather_final(self, index: np.ndarray) -> np.ndarray:
        return self._final_flat.take(index, axis=0)


class FrameObservations:
    """Each frame stored once; stacks of ``frame_stack`` frames (oldest first) rebuilt on sampling."""

    keeps_final_observation = False

    def __init__(self, frame_stack: int = 4) -> None:
        if frame_stack < 1:
            raise ValueError(f"FrameObservations: frame_stack={frame_stack} must be positive")
        self.frame_stack = int(frame_stack)
        self.lookback = self.frame_stack - 1

    def allocate(self, example: np.ndarray, rows: int, num_envs: int, shared: bool) -> None:
        """``example``: one stacked observation [frame_stack, H, W]."""
        example = np.asarray(example)
        if example.ndim != 3 or example.shape[0] != self.frame_stack:
            raise ValueError(
                f"FrameObservations: observations must be [frame_stack={self.frame_stack}, H, W], "
                f"got {example.shape}"
            )
        self._frames = _alloc(example[-1], (rows, num_envs), shared)
        self._frames_flat = self._frames.reshape(rows * num_envs, *example.shape[1:])
        self._num_envs = num_envs

    @property
    def nbytes(self) -> int:
        return self._frames.nbytes

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"frames": self._frames}

    def write(self, positions: slice | np.ndarray, samples: NamedArrays) -> None:
        """Store the newest frame of each ``samples.observation`` [T, B, frame_stack, H, W]."""
        self._frames[positions] = np.asarray(samples.observation)[:, :, -1]

    def gather(self, index: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
        """Rebuild stacks at flat indices ``index`` [n] -> [n, frame_stack, H, W].

        ``episode_start`` [R * B] (flat) marks steps that begin an episode: frames older than such a
        step belong to the previous episode and come back as zeros.

        The stacks are laid out channels-last in memory (an [n, H, W, frame_stack] array seen
        through a transpose): the layout ``NatureConvTorso`` trains in, so the frames are copied
        once here instead of gathered and then converted (docs/results/core_measurements.md,
        replay/observations.py).
        """
        frames, size = self._frames_flat, self._frames_flat.shape[0]
        out = np.empty((len(index), *frames.shape[1:], self.frame_stack), dtype=frames.dtype)
        out[..., -1] = frames.take(index, axis=0)
        padded = episode_start.take(index)  # steps older than this one are padding
        for back in range(1, self.frame_stack):
            older = (index - back * self._num_envs) % size  # same env, ``back`` rows earlier
            older_frames = frames.take(older, axis=0)
            older_frames[padded] = 0
            out[..., -1 - back] = older_frames
            padded |= episode_start.take(older)
        return out.transpose(0, 3, 1, 2)


def observations_for(example: np.ndarray) -> FullObservations | FrameObservations:
    """The storage for observations like ``example`` (one observation): ``FrameObservations`` for
    stacked 8-bit frames ``[frame_stack, H, W]`` (Atari), ``FullObservations`` for everything else:
    vectors, and MinAtar's boolean channel maps ``[C, 10, 10]``, whose channels are different objects
    of one moment, not frames of successive steps, so no stack can be rebuilt from earlier rows."""
    example = np.asarray(example)
    if example.ndim == 3 and example.dtype == np.uint8:
        return FrameObservations(example.shape[0])
    return FullObservations()


def observation_bytes_per_step(example: np.ndarray) -> int:
    """Bytes the replay keeps of one env step's observation like ``example`` (``observations_for``'s
    storage; module docstring): one frame of a frame stack, else the observation and final observation."""
    example = np.asarray(example)
    if isinstance(observations_for(example), FrameObservations):
        return example[-1].nbytes
    return 2 * example.nbytes
