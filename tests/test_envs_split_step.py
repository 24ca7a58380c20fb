"""``VecEnv.send_step`` / ``receive_step``: the split step is the step, a step's outputs are never
modified by later steps (``fresh_outputs``, which lets samplers skip copying observations and write
a record while the envs take the next step), and the two halves must alternate."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env

torch.set_num_threads(1)

CONFIGS = {
    # Truncated after 40 frames: the 30 steps span resets, where the native backend resets ended
    # envs inside receive_step and copies the final observation.
    "native": EnvConfig("pong", max_episode_frames=40),
    "gymnasium": EnvConfig("pong", backend="gymnasium", max_episode_frames=40),
    "cartpole": EnvConfig(id="CartPole-v1", kind="gym"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_split_step_equals_step_and_outputs_stay_intact(name):
    config, steps, n = CONFIGS[name], 30, 3
    actions = np.random.default_rng(0).integers(0, 2, size=(steps, n))
    with make_vec_env(config, n, 4) as env:
        env.reset()
        expected = [env.step(a).map(np.copy) for a in actions]
    with make_vec_env(config, n, 4) as env:
        assert env.fresh_outputs
        env.reset()
        kept = []
        for a in actions:
            env.send_step(a)
            kept.append(env.receive_step())  # no copy: later steps must leave these arrays alone
    assert sum(int(step.terminated.sum() + step.truncated.sum()) for step in expected) > 0
    for t, (a, b) in enumerate(zip(expected, kept)):
        for (field, x), (_, y) in zip(a.flat_items(), b.flat_items(), strict=True):
            np.testing.assert_array_equal(y, x, err_msg=f"{name}: {field} of step {t}")


def test_halves_must_alternate():
    with make_vec_env(CONFIGS["cartpole"], 2, 0) as env:
        env.reset()
        with pytest.raises(RuntimeError, match="without send_step"):
            env.receive_step()
        env.send_step(np.zeros(2, dtype=np.int64))
        with pytest.raises(RuntimeError, match="previous step was not received"):
            env.send_step(np.zeros(2, dtype=np.int64))
        assert env.receive_step().observation.shape == (2, 4)
