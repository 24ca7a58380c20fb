"""Learning checks for policy gradients (A2C, PPO, recurrent PPO) and Q-value policy gradients
(DDPG, TD3, SAC), run through ``algorithms.train.train``.

Arms, each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` eval-mode episodes after the last training step: the most likely
action for PPO/A2C, the policy mean for SAC, mu(s) for DDPG/TD3):

| arm | setting (task, where not the setting's own) | budget (env steps) | pass |
|---|---|---|---|
| ``ppo_cartpole`` | ``ppo_cartpole_bench`` (CartPole-v1) | 100k | median seed >= 475 |
| ``a2c_cartpole`` | ``a2c_cartpole_a3c`` (CartPole-v1) | 100k | median seed >= 475 |
| ``ppo_masked`` (feed-forward) | ``ppo_cartpole_bench``, velocities masked | 100k | reported |
| ``rppo_masked`` (LSTM) | ``ppo_lstm_masked_cartpole_bench`` | 100k | above ``ppo_masked``'s CI |
| ``sac_pendulum`` | ``sac_1k_start`` on Pendulum-v1 | 20k | median seed >= -200 |
| ``td3_pendulum`` | ``td3_1k_start`` on Pendulum-v1 | 20k | median seed >= -200 |
| ``ddpg_pendulum`` | ``ddpg_1k_start`` on Pendulum-v1 | 20k | median seed >= -200 |
| ``sac_halfcheetah``, ``td3_halfcheetah`` | ``sac``, ``td3`` (HalfCheetah-v5) | 100k | reported |

Every value comes from the arm's setting (``repro/configs/settings/``; each file says where its values
come from and what its CartPole variants change from rl-baselines3-zoo's). The bench sets only
budget-type values: PPO's and A2C's annealing stretched over the arm's budget, and the QPG warm-ups
cut to a tenth of a short budget. ``--budget-scale`` shrinks every budget to fit a machine; the
summary says which scale ran. Results: one CSV row per (arm, seed) and a Markdown summary with the
median, the mean and a 95% bootstrap CI over seeds (scipy).

    python -m bench.bench_learn_pg --out runs/bench/learn_pg.csv [--arms ppo_cartpole,sac_pendulum]
        [--seeds 5] [--budget-scale 1.0] [--jobs 1]
"""

from __future__ import annotations

from typing import Any

from bench import learning
from bench.learning import Arm

# The tasks where an arm runs its setting on another env than the setting's own.
MASKED = {"env.mask_velocity": True}
PENDULUM = {"env.id": "Pendulum-v1"}


def _anneal(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # Learning rate (and PPO's clip range) annealed to 0 over the run (Schulman et al. 2017, Table 5;
    # Mnih et al. 2016, Sec. 8), whatever budget the run is given.
    return {"algo.anneal_env_steps": budget}


def _warmup(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # The setting's uniform-random start (TD3's rule, Fujimoto et al. 2018, Sec. 6.1), cut to a tenth
    # of a shorter budget so that most of the run learns, and at least 256 steps: SAC's minibatch (the
    # stored steps a first update needs), above TD3's and DDPG's 100.
    n = max(min(configs["algo"].random_steps, budget // 10), 256)
    return {"algo.random_steps": n, "algo.learning_starts_steps": n}


ARMS: dict[str, Arm] = {
    "ppo_cartpole": Arm("ppo_cartpole_bench", 100_000, ">= 475", _anneal),
    "a2c_cartpole": Arm("a2c_cartpole_a3c", 100_000, ">= 475", _anneal),
    "ppo_masked": Arm("ppo_cartpole_bench", 100_000, "reported", _anneal, task=MASKED),
    "rppo_masked": Arm("ppo_lstm_masked_cartpole_bench", 100_000, "above ppo_masked", _anneal),
    "sac_pendulum": Arm("sac_1k_start", 20_000, ">= -200", _warmup, task=PENDULUM),
    "td3_pendulum": Arm("td3_1k_start", 20_000, ">= -200", _warmup, task=PENDULUM),
    "ddpg_pendulum": Arm("ddpg_1k_start", 20_000, ">= -200", _warmup, task=PENDULUM),
    "sac_halfcheetah": Arm("sac", 100_000, "reported", _warmup, eval_episodes=5),
    "td3_halfcheetah": Arm("td3", 100_000, "reported", _warmup, eval_episodes=5),
}


if __name__ == "__main__":
    # Workers look the arms up by module name, so pass the importable one, not "__main__".
    learning.main("bench.bench_learn_pg", "Policy-gradient learning checks", __doc__.splitlines()[0])
