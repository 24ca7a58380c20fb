"""Learning checks for policy gradients (A2C, PPO, recurrent PPO) and Q-value policy gradients
(DDPG, TD3, SAC), run through ``algorithms.train.train``.

Arms (issue 4, item 5), each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` eval-mode episodes after the last training step: the most likely
action for PPO/A2C, the policy mean for SAC, mu(s) for DDPG/TD3):

| arm | env | budget (env steps) | pass |
|---|---|---|---|
| ``ppo_cartpole`` | CartPole-v1 | 100k | median seed >= 475 |
| ``a2c_cartpole`` | CartPole-v1 | 100k | median seed >= 475 |
| ``ppo_masked`` (feed-forward) | CartPole-v1, velocities masked | 100k | reported |
| ``rppo_masked`` (LSTM) | CartPole-v1, velocities masked | 100k | median above ``ppo_masked``'s CI |
| ``sac_pendulum``, ``td3_pendulum``, ``ddpg_pendulum`` | Pendulum-v1 | 20k | median seed >= -200 |
| ``sac_halfcheetah``, ``td3_halfcheetah`` | HalfCheetah-v5 | 100k | reported |

Settings: the ``PRESETS`` of each algorithm module (``cartpole`` from rl-baselines3-zoo,
``pendulum``, and the published MuJoCo settings), with PPO's learning-rate annealing stretched over
the arm's budget; A2C on CartPole runs A3C's 16 actors, entropy bonus and annealing (see
``_a2c_cartpole``). ``--budget-scale`` shrinks every budget to fit a machine; the summary says
which scale ran. Results: one CSV row per (arm, seed) and a Markdown summary with the median, the
mean and a 95% bootstrap CI over seeds (scipy).

    python -m bench.bench_learn_pg --out runs/bench/learn_pg.csv [--arms ppo_cartpole,sac_pendulum]
        [--seeds 5] [--budget-scale 1.0] [--jobs 1]
"""

from __future__ import annotations

from algorithms.algos import a2c, ddpg, ppo, sac, td3
from algorithms.envs.config import EnvConfig
from bench import learning
from bench.learning import Arm

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")
MASKED = EnvConfig(id="CartPole-v1", kind="gym", mask_velocity=True)
PENDULUM = EnvConfig(id="Pendulum-v1", kind="gym")
HALFCHEETAH = EnvConfig(id="HalfCheetah-v5", kind="gym")


def _ppo_cartpole(budget: int) -> ppo.Config:
    return ppo.Config.preset("cartpole", anneal_env_steps=budget)


def _a2c_cartpole(budget: int) -> a2c.Config:
    # The zoo's CartPole setting (preset "cartpole": 8 envs x 5 steps, constant lr 7e-4, no entropy
    # bonus) is tuned for 500k steps; at this arm's 100k, seeds 0-9 finished at >= 475 on 5 of 10
    # (median 480.8; SB3's own A2C with it: 3 of 5). This arm runs A3C's own shape instead (Mnih et
    # al. 2016, Sec. 8: 16 actors, t_max 5, entropy 0.01, learning rate annealed to 0) at a rate of
    # 1.5e-3: 7 of 10 at >= 475, median 493 (2026-11-30; docs/results/a2c_cartpole_sweep.md lists
    # every setting tried, several of which passed on seeds 0-4 and failed on 5-9).
    return a2c.Config.preset("cartpole", entropy_coef=0.01, anneal_env_steps=budget, learning_rate=1.5e-3)


def _ppo_masked(budget: int) -> ppo.Config:
    return ppo.Config.preset("cartpole", anneal_env_steps=budget)


def _rppo_masked(budget: int) -> ppo.Config:
    # rl-baselines3-zoo's RecurrentPPO CartPoleNoVel-v1 (hyperparams/ppo_lstm.yml): the PPO CartPole
    # settings with a 64-unit LSTM on a 64-unit layer; minibatches of 2 whole env columns of 32 steps.
    return ppo.Config.preset(
        "cartpole",
        anneal_env_steps=budget,
        recurrent=True,
        lstm_size=64,
        hidden_sizes=(64,),
        minibatch_size_steps=64,
    )


def _warmup(budget: int, steps: int) -> dict[str, int]:
    n = max(min(steps, budget // 10), 256)
    return {"random_steps": n, "learning_starts_steps": n}


ARMS: dict[str, Arm] = {
    "ppo_cartpole": Arm("ppo", CARTPOLE, 100_000, ">= 475", _ppo_cartpole, 32, 8),
    "a2c_cartpole": Arm("a2c", CARTPOLE, 100_000, ">= 475", _a2c_cartpole, 5, 16),
    "ppo_masked": Arm("ppo", MASKED, 100_000, "reported", _ppo_masked, 32, 8),
    "rppo_masked": Arm("ppo", MASKED, 100_000, "above ppo_masked", _rppo_masked, 32, 8),
    "sac_pendulum": Arm(
        "sac", PENDULUM, 20_000, ">= -200", lambda b: sac.Config.preset("pendulum", **_warmup(b, 1_000)), 1, 1
    ),
    "td3_pendulum": Arm(
        "td3", PENDULUM, 20_000, ">= -200", lambda b: td3.Config.preset("pendulum", **_warmup(b, 1_000)), 1, 1
    ),
    "ddpg_pendulum": Arm(
        "ddpg",
        PENDULUM,
        20_000,
        ">= -200",
        lambda b: ddpg.Config.preset("pendulum", **_warmup(b, 1_000)),
        1,
        1,
    ),
    "sac_halfcheetah": Arm(
        "sac", HALFCHEETAH, 100_000, "reported", lambda b: sac.Config(**_warmup(b, 10_000)), 1, 1, 5
    ),
    "td3_halfcheetah": Arm(
        "td3", HALFCHEETAH, 100_000, "reported", lambda b: td3.Config(**_warmup(b, 10_000)), 1, 1, 5
    ),
}


if __name__ == "__main__":
    # Workers look the arms up by module name, so pass the importable one, not "__main__".
    learning.main("bench.bench_learn_pg", "Policy-gradient learning checks", __doc__.splitlines()[0])
