"""Learning checks for the DQN family and R2D1, run through ``algorithms.train.train``.

Arms (issue 3, item 5), each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` greedy episodes after the last training step):

| arm | env | budget (env steps) | pass |
|---|---|---|---|
| ``dqn`` | CartPole-v1 | 50k (the zoo's budget, Adam 1e-3; see ``_dqn``) | median seed >= 475 |
| ``c51`` | CartPole-v1 | 100k | median seed >= 475 |
| ``rainbow`` (minus noisy) | CartPole-v1 | 100k | median seed >= 475 |
| ``r2d1_masked`` | CartPole-v1, velocities masked | 300k | median seed >= 400 |
| ``dqn_masked`` (feed-forward) | CartPole-v1, velocities masked | 300k | reported (expected below R2D1) |
| ``dqn_pong`` | Pong (Atari protocol, clipped rewards) | 500k | median seed > -21 (the random score) |

The CartPole settings follow rl-baselines3-zoo's tuned DQN for CartPole-v1 (``hyperparams/dqn.yml``:
Adam 2.3e-3, batch 64, 256-unit layers, 128 updates per 256 steps, the target synced every 10
steps during collection, i.e. before each block of 128 updates, epsilon to 0.04 over 16% of 50k
steps); the ``dqn`` arm lowers the rate to 1e-3, C51 and Rainbow reuse them with a [0, 100] support.
``--budget-scale`` shrinks every budget (and the exploration and learning-start counts with it) to
fit a machine; the summary says which scale ran. Results: one CSV row per (arm, seed) and a
Markdown summary per arm with the median, the mean and a 95% bootstrap CI over seeds (scipy).

    python -m bench.bench_learn_dqn --out runs/bench/learn_dqn.csv [--arms dqn,r2d1_masked]
        [--seeds 5] [--first-seed 0] [--budget-scale 1.0] [--jobs 1]
"""

from __future__ import annotations

from typing import Any

from algorithms.algos import c51, dqn, r2d1, rainbow
from algorithms.envs.config import EnvConfig
from bench import learning
from bench.learning import Arm

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")
MASKED = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=True)
# Nature DQN's training protocol: rewards clipped, a lost life terminal for the learner.
PONG = EnvConfig(id="pong", kind="atari", clip_rewards=True, episodic_life=True)


def zoo_cartpole(budget: int, full_budget: int) -> dict[str, Any]:
    """rl-baselines3-zoo's DQN CartPole-v1 settings in this code base's units (module docstring).

    The zoo's learning start (1,000 steps) and exploration length (8,000) hold at the arm's
    ``full_budget``; a ``--budget-scale`` run shrinks them in proportion.
    """
    return dict(
        discount=0.99,
        batch_size=64,
        replay_size_steps=100_000,
        learning_starts_steps=max(1_000 * budget // full_budget, 256),
        train_every_steps=2,  # 128 updates per 256 steps
        # SB3 syncs the target every 10 env steps while collecting, not between the 128 gradient steps
        # that follow a collection: once per 128 updates.
        target_update_period_updates=128,
        clip_grad_norm=10.0,  # SB3's max_grad_norm
        optimizer="adam",
        learning_rate=2.3e-3,
        eps_start=1.0,
        eps_final=0.04,
        eps_decay_steps=max(8_000 * budget // full_budget, 1),
        eps_eval=0.0,
        mlp_hidden_sizes=(256, 256),
    )


def _dqn(b: int) -> dqn.Config:
    # 50k steps, the zoo's own budget for this setting (n_timesteps 5e4), at Adam 1e-3 instead of the
    # zoo's 2.3e-3. Measured 2026-11-30, 5 seeds each, final greedy returns:
    # - zoo rate at 100k: 29, 500, 119, 116, 115 (median 116): every seed's mean Q passed 113, above
    #   the largest possible 100 (reward 1, gamma 0.99); training returns peaked at 40-60k steps and
    #   then collapsed: Q-learning's overestimation over twice the budget the zoo tuned for;
    # - zoo rate at 50k: 162, 500, 94, 426, 500 (median 426); SB3's own DQN with the zoo setting on
    #   this machine: 18.7, 500, 500, 189, 500;
    # - 1e-3 at 50k, seeds 0-9: 500, 500, 453, 500, 176, 121, 325, 500, 500, 500 (median 500). Also
    #   screened on seeds 0, 2, 3 (the zoo rate's failures): double Q 500, 212, 500; gamma 0.98
    #   123, 190, 120 (runs/bench/learn_dqn_sweep.md).
    return dqn.Config(**{**zoo_cartpole(b, 50_000), "learning_rate": 1e-3})


def _dqn_masked(b: int) -> dqn.Config:
    return dqn.Config(**zoo_cartpole(b, 100_000))


def _c51(b: int) -> c51.Config:
    # Measured 2026-11-30 (5 seeds, 100k): finals 500 on 4 seeds, 287 on one. Adam 1e-3 instead was
    # worse (median 479, two seeds at 254 and 327): Q grew more slowly and the greedy policy drifted
    # off the track after about 250 steps. An earlier single 50k run scoring 170 was the short budget.
    return c51.Config(**zoo_cartpole(b, 100_000), v_min=0.0, v_max=100.0, eps_per_env="same")


def _rainbow(b: int) -> rainbow.Config:
    return rainbow.Config(
        **zoo_cartpole(b, 100_000), v_min=0.0, v_max=100.0, priority_beta_anneal_updates=b // 2
    )


def _r2d1_masked(b: int) -> r2d1.Config:
    return r2d1.Config(
        discount=0.99,
        n_step=5,
        sequence_length_steps=20,
        burn_in_steps=10,
        sequence_period_steps=10,
        batch_size_sequences=32,
        replay_size_steps=100_000,
        learning_starts_steps=max(5_000 * b // 300_000, 500),
        replay_ratio=16.0,  # trained steps per env step: 4 updates of 32 x 20 per sampler batch of 160
        target_update_period_updates=250,
        learning_rate=1e-3,
        lstm_size=64,
        fc_size=64,
        head_hidden_size=64,
        mlp_hidden_sizes=(64,),
        eps_per_env="apex",
        eps_decay_steps=0,
        eps_eval=0.0,
    )


def _dqn_pong(b: int) -> dqn.Config:
    # Nature DQN with a CPU-sized schedule: replay 100k, learning after 10k steps, epsilon to 0.01
    # over the first 20% of the budget, target every 1k updates, Adam 1e-4 (as SB3's zoo for Pong).
    # Measured 2026-11-30, seed 0, 84 min on one core: training return per 50k steps between -20.7
    # and -20.0 up to 300k, then -19.1, -18.7, -17.8, -14.4 at 500k; final eval -10, -20, -5
    # (random: -20.7).
    return dqn.Config(
        replay_size_steps=100_000,
        learning_starts_steps=10_000,
        target_update_period_updates=1_000,
        optimizer="adam",
        learning_rate=1e-4,
        optimizer_eps=1.5e-4,
        eps_final=0.01,
        eps_decay_steps=max(b // 5, 1),
        eps_eval=0.01,
    )


ARMS: dict[str, Arm] = {
    "dqn": Arm("dqn", CARTPOLE, 50_000, ">= 475", _dqn, 256, 1),
    "c51": Arm("c51", CARTPOLE, 100_000, ">= 475", _c51, 256, 1),
    "rainbow": Arm("rainbow", CARTPOLE, 100_000, ">= 475", _rainbow, 256, 1),
    "r2d1_masked": Arm("r2d1", MASKED, 300_000, ">= 400", _r2d1_masked, 20, 8),
    "dqn_masked": Arm("dqn", MASKED, 300_000, "reported", _dqn_masked, 256, 1),
    "dqn_pong": Arm("dqn", PONG, 500_000, "> -21", _dqn_pong, 4, 1, eval_episodes=3),
}


if __name__ == "__main__":
    # Workers look the arms up by module name, so pass the importable one, not "__main__".
    learning.main("bench.bench_learn_dqn", "DQN-family learning checks", __doc__.splitlines()[0])
