"""Learning checks for the DQN family and R2D1, run through ``algorithms.train.train``.

Arms, each over several seeds, scored by the mean return of the final evaluation
(``SamplerConfig.eval_episodes`` greedy episodes after the last training step):

| arm | setting | env | budget (env steps) | pass |
|---|---|---|---|---|
| ``dqn`` | ``dqn_cartpole_bench`` | CartPole-v1 | 50k (the zoo's budget) | median seed >= 475 |
| ``c51`` | ``c51_cartpole_bench`` | CartPole-v1 | 100k | median seed >= 475 |
| ``rainbow`` (minus noisy) | ``rainbow_cartpole_bench`` | CartPole-v1 | 100k | median seed >= 475 |
| ``r2d1_masked`` | ``r2d1_masked_cartpole_bench`` | CartPole-v1, no velocities | 300k | median seed >= 400 |
| ``dqn_masked`` (feed-forward) | ``dqn_masked_cartpole_bench`` | the same | 300k | reported (below R2D1) |
| ``dqn_pong`` | ``dqn_nature_cpu`` | Pong (Atari protocol, clipped rewards) | 500k | median seed > -21 |

(-21 is Pong's random score.) The CartPole settings follow rl-baselines3-zoo's tuned DQN for
CartPole-v1 (``dqn_cartpole_zoo``: Adam 2.3e-3, batch 64, 256-unit layers, 128 updates per 256
steps, the target synced before each block of 128 updates, epsilon to 0.04 over 16% of 50k steps);
the ``dqn`` arm lowers the rate to 1e-3, C51 and Rainbow reuse them with a [0, 100] support. Each
setting file gives its values' sources and what was measured with them. The bench sets only
budget-type values: learning start, exploration length and (Rainbow) the importance-sampling
schedule scale with the budget from the setting's own ``runner.n_steps``, so ``--budget-scale``
shrinks them with every budget to fit a machine; the summary says which scale ran. Results: one CSV
row per (arm, seed) and a Markdown summary per arm with the median, the mean and a 95% bootstrap CI
over seeds (scipy).

    python -m bench.bench_learn_dqn --out runs/bench/learn_dqn.csv [--arms dqn,r2d1_masked]
        [--seeds 5] [--first-seed 0] [--budget-scale 1.0] [--jobs 1]
"""

from __future__ import annotations

from typing import Any

from bench import learning
from bench.learning import Arm


def _scaled(configs: dict[str, Any], budget: int, key: str, floor: int) -> int:
    """The setting's ``algo.<key>`` count for ``budget`` env steps instead of its own ``runner.n_steps``,
    at least ``floor``."""
    return max(getattr(configs["algo"], key) * budget // configs["runner"].n_steps, floor)


def _zoo_schedule(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # The learning start and exploration length hold at the setting's budget and shrink with a
    # shorter one; learning waits at least one sampler batch.
    batch = configs["sampler"].batch_T * configs["sampler"].batch_B
    return {
        "algo.learning_starts_steps": _scaled(configs, budget, "learning_starts_steps", batch),
        "algo.eps_decay_steps": _scaled(configs, budget, "eps_decay_steps", 1),
    }


def _rainbow_schedule(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # Beta reaches 1 at the end of the run (Hessel et al. 2018, Table 1), whatever its budget.
    beta = _scaled(configs, budget, "priority_beta_anneal_updates", 1)
    return {**_zoo_schedule(configs, budget), "algo.priority_beta_anneal_updates": beta}


def _r2d1_start(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # The learning start shrinks with a shorter budget; at least about 3 sampler batches of 160 steps.
    return {"algo.learning_starts_steps": _scaled(configs, budget, "learning_starts_steps", 500)}


def _pong_exploration(configs: dict[str, Any], budget: int) -> dict[str, Any]:
    # Epsilon reaches its floor after the same fraction of any budget (20%).
    return {"algo.eps_decay_steps": _scaled(configs, budget, "eps_decay_steps", 1)}


ARMS: dict[str, Arm] = {
    "dqn": Arm("dqn_cartpole_bench", 50_000, ">= 475", _zoo_schedule),
    "c51": Arm("c51_cartpole_bench", 100_000, ">= 475", _zoo_schedule),
    "rainbow": Arm("rainbow_cartpole_bench", 100_000, ">= 475", _rainbow_schedule),
    "r2d1_masked": Arm("r2d1_masked_cartpole_bench", 300_000, ">= 400", _r2d1_start),
    "dqn_masked": Arm("dqn_masked_cartpole_bench", 300_000, "reported", _zoo_schedule),
    "dqn_pong": Arm("dqn_nature_cpu", 500_000, "> -21", _pong_exploration, eval_episodes=3),
}


if __name__ == "__main__":
    # Workers look the arms up by module name, so pass the importable one, not "__main__".
    learning.main("bench.bench_learn_dqn", "DQN-family learning checks", __doc__.splitlines()[0])
