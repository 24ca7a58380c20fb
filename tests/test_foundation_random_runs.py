"""End to end through the foundation: a random policy on Atari Pong (native vector backend), a MuJoCo
task and CartPole, written to run directories with the counters and logger, read back by the reader.
The counters must add up: frames = 4 x env steps on Atari, episodes = episodes seen, one row per
log interval."""

import numpy as np
import pytest

from algorithms.counters import Counters
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.logger import RunLogger
from algorithms.rundir import RunDir, read_run, run_path

CASES = [
    (EnvConfig(id="pong", kind="atari", backend="native", max_episode_frames=400), 4),
    (EnvConfig(id="HalfCheetah-v5", kind="gym", max_episode_steps=50), 1),
    (EnvConfig(id="CartPole-v1", kind="gym"), 1),
]


@pytest.mark.parametrize(("env_config", "frameskip"), CASES, ids=lambda c: getattr(c, "id", ""))
def test_random_policy_run_directory_adds_up(tmp_path, env_config, frameskip):
    num_envs, batch_T, iterations, log_every = 2, 25, 8, 2
    env = make_vec_env(env_config, num_envs=num_envs, seed=7)
    assert env.frameskip == frameskip
    env.action_space.seed(7)
    path = run_path(tmp_path, "foundation", "random", env_config.id, 0)
    run = RunDir.open(path, {"env": env_config.id, "policy": "random"}, {"seed": 7})
    counters = Counters(frameskip=env.frameskip)
    logger = RunLogger(run, total_steps=num_envs * batch_T * iterations, console=False)
    env.reset()
    pending, all_episodes, rows = [], [], 0
    for itr in range(iterations):
        with counters.timer("sampling"):
            finished = []
            for _ in range(batch_T):
                actions = np.stack([env.action_space.sample() for _ in range(num_envs)])
                step = env.step(actions)
                done = step.terminated | step.truncated
                assert not np.any(step.terminated & step.truncated)
                for b in np.flatnonzero(done):
                    finished.append(
                        {
                            "return": float(step.env_info.episode_return[b]),
                            "length": int(step.env_info.episode_length[b]),
                        }
                    )
            counters.add_env_steps(num_envs * batch_T, episodes=len(finished))
        pending += finished
        all_episodes += finished
        if (itr + 1) % log_every == 0:
            logger.log(counters, pending, {})
            pending, rows = [], rows + 1
    logger.close()
    run.set_status("complete")
    env.close()

    data = read_run(path)
    assert data.status == "complete", data.problems
    progress = data.progress
    assert len(progress) == rows == iterations // log_every
    steps_per_row = num_envs * batch_T * log_every
    assert progress["env_steps"].tolist() == [steps_per_row * (i + 1) for i in range(rows)]
    assert (progress["frames"] == frameskip * progress["env_steps"]).all()
    assert progress["episodes"].iloc[-1] == len(all_episodes)
    assert progress["sampler_itrs"].iloc[-1] == iterations
    assert progress["episodes_logged"].sum() == len(all_episodes)
    assert progress["updates"].eq(0).all() and progress["replay_ratio_trained"].eq(0).all()
    assert (progress["steps_per_second"] > 0).all()
    assert data.metadata["seeds"] == {"seed": 7}
    if env_config.id == "pong":
        # 400-frame cap = 100 env steps per episode: every episode is truncated by then, none shorter.
        assert len(all_episodes) == num_envs * (batch_T * iterations // 100)
        assert all(ep["length"] == 100 for ep in all_episodes)
        assert all(-21 <= ep["return"] <= 21 for ep in all_episodes)
