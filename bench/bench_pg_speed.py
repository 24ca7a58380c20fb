"""PPO and SAC training throughput: this code base against Stable-Baselines3, same machine, same run.

* PPO on Pong: 8 envs x 128 steps per batch, 4 epochs of minibatch 256, the Nature network
  (shared torso) for both; ``--ppo-iterations`` timed batches after one untimed batch.
* SAC on HalfCheetah-v5: one env, batch 256, one update per env step, 256-256 networks (the SAC
  defaults of both libraries); ``--sac-steps`` timed env steps after ``--sac-learning-starts``
  untimed ones (uniform-random actions, no updates).

Both learners step the very same env objects: this code base's vector envs, handed to SB3 through
its ``VecEnv`` interface (``sb3_vec_env``), with the same torch thread count (all cores by default,
the setting of issue 4's reference figures; ``--threads 1`` for one), so only the learners
differ. The figure is env steps per second of sampling + learning; every repeat goes to the CSV, the
median of the repeats and two ratios to the Markdown summary: that of the medians, and the median
of the repeats' own ratios (the two learners of a repeat run back to back) with its 95% bootstrap
CI over the repeats. Every figure is given per second of
wall-clock time and per second of this process's CPU time (``time.process_time``, all threads): on
an idle machine they agree; on a shared one the wall-clock figure also counts the time other jobs
held the cores, and the CPU-time figure compares the learners' work.

The machine's limit for each configuration comes from costs measured in the same run, with this
code base's components: the vectorised env step (``t_env``), one batched action selection
(``t_act``) and the learning work (one ``optimize`` call on a PPO batch, ``t_optimize``; one SAC
update, ``t_update``):

    PPO: limit = T * B / (T * (t_act + t_env) + t_optimize)        [env steps per second]
    SAC: limit = 1 / (t_act + t_env + t_update)

    python -m bench.bench_pg_speed --out runs/bench/pg_speed.csv [--repeats 3] [--threads N]
        [--ppo-iterations 2] [--sac-steps 1000] [--sac-learning-starts 1000] [--only ppo|sac]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
from pathlib import Path

import numpy as np
import torch

from algorithms.algos import ppo, sac
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.samplers.base import BatchSpec
from algorithms.samplers.serial import SerialSampler
from algorithms.train import SamplerConfig
from bench.bench_dqn_speed import clocks, sb3_rate, sb3_vec_env, step_clock
from bench.bench_env import cpu_model
from bench.learning import paired_ratio

PONG = EnvConfig(id="pong", kind="atari", backend="native", clip_rewards=True)
HALFCHEETAH = EnvConfig(id="HalfCheetah-v5", kind="gym")
PPO_T, PPO_B, PPO_EPOCHS, PPO_MINIBATCH = 128, 8, 4, 256
COLUMNS = ("steps_per_second", "steps_per_cpu_second")
SAC_BATCH = 256


def _spaces(env_config: EnvConfig):
    env = make_vec_env(env_config, 1, 0)
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


# --- PPO ----------------------------------------------------------------------------------------------


def ppo_config() -> ppo.Config:
    return ppo.Config.preset("atari", epochs=PPO_EPOCHS, minibatch_size_steps=PPO_MINIBATCH)


def build_ours_ppo(seed: int):
    torch.manual_seed(seed)
    config = ppo_config()
    agent = ppo.build_agent(config, *_spaces(PONG))
    sampler = SerialSampler(PONG, agent, SamplerConfig(batch_T=PPO_T, batch_B=PPO_B), seed)
    sampler.initialize()
    return agent, sampler, ppo.Algo(config, agent, PONG.env_frameskip, BatchSpec(PPO_T, PPO_B))


def time_ours_ppo(iterations: int, seed: int) -> np.ndarray:
    agent, sampler, algo = build_ours_ppo(seed)
    start = 0.0
    for itr in range(iterations + 1):
        if itr == 1:  # the first batch (allocation, first-call overheads) is not timed
            start = clocks()
        agent.set_mode("sample", itr * PPO_T * PPO_B)
        samples, _ = sampler.sample(itr)
        agent.set_mode("train", (itr + 1) * PPO_T * PPO_B)
        algo.optimize(itr, samples)
    elapsed = clocks() - start
    sampler.shutdown()
    return iterations * PPO_T * PPO_B / elapsed


def rollout_clock(start_at: int):
    """An SB3 callback recording when rollout ``start_at`` (0-based) begins, in ``.start``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollouts, self.start = 0, None

        def _on_rollout_start(self) -> None:
            if self.rollouts == start_at:
                self.start = clocks()
            self.rollouts += 1

        def _on_step(self) -> bool:
            return True

    return Clock()


def time_sb3_ppo(iterations: int, seed: int) -> np.ndarray:
    from stable_baselines3 import PPO

    env = sb3_vec_env(PONG, PPO_B, seed)
    c = ppo_config()
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=PPO_T,
        batch_size=PPO_MINIBATCH,
        n_epochs=PPO_EPOCHS,
        learning_rate=c.learning_rate,
        clip_range=c.clip_epsilon,
        vf_coef=c.value_coef,
        ent_coef=c.entropy_coef,
        clip_grad_norm=c.clip_grad_norm,
        gamma=c.discount,
        gae_lambda=c.gae_lambda,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    steps = iterations * PPO_T * PPO_B
    return sb3_rate(model, env, rollout_clock(1), steps + PPO_T * PPO_B, steps)


def ppo_limit(seed: int, n: int = 50) -> dict[str, np.ndarray]:
    agent, sampler, algo = build_ours_ppo(seed)
    samples, _ = sampler.sample(0)
    sampler.shutdown()
    obs = samples.observation[0]
    zeros = torch.zeros(PPO_B, dtype=torch.long)
    agent.set_mode("sample", 0)
    start = clocks()
    for _ in range(n):
        agent.step(obs, zeros, torch.zeros(PPO_B), None)
    t_act = (clocks() - start) / n
    env = make_vec_env(PONG, PPO_B, seed)
    env.reset()
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, size=(4 * n, PPO_B))
    start = clocks()
    for a in actions:
        env.step(a)
    t_env = (clocks() - start) / (4 * n)
    env.close()
    algo.optimize(0, samples)  # first call (allocations) untimed
    start = clocks()
    algo.optimize(1, samples)
    t_optimize = clocks() - start
    limit = PPO_T * PPO_B / (PPO_T * (t_act + t_env) + t_optimize)
    return {"t_act_s": t_act, "t_env_s": t_env, "t_learn_s": t_optimize, "limit_steps_per_s": limit}


# --- SAC ----------------------------------------------------------------------------------------------


def sac_config(learning_starts: int) -> sac.Config:
    return sac.Config(
        batch_size=SAC_BATCH, random_steps=learning_starts, learning_starts_steps=learning_starts
    )


def build_ours_sac(learning_starts: int, seed: int):
    torch.manual_seed(seed)
    config = sac_config(learning_starts)
    agent = sac.build_agent(config, *_spaces(HALFCHEETAH))
    sampler = SerialSampler(HALFCHEETAH, agent, SamplerConfig(batch_T=1, batch_B=1), seed)
    sampler.initialize()
    return agent, sampler, sac.Algo(config, agent, 1, BatchSpec(1, 1))


def time_ours_sac(steps: int, learning_starts: int, seed: int) -> np.ndarray:
    agent, sampler, algo = build_ours_sac(learning_starts, seed)
    start = 0.0
    for itr in range(learning_starts + steps):
        if itr == learning_starts:
            start = clocks()
        agent.set_mode("sample", itr)
        samples, _ = sampler.sample(itr)
        agent.set_mode("train", itr + 1)
        algo.optimize(itr, samples)
    elapsed = clocks() - start
    sampler.shutdown()
    return steps / elapsed


def time_sb3_sac(steps: int, learning_starts: int, seed: int) -> np.ndarray:
    from stable_baselines3 import SAC

    env = sb3_vec_env(HALFCHEETAH, 1, seed)
    model = SAC(
        "MlpPolicy",
        env,
        batch_size=SAC_BATCH,
        learning_starts=learning_starts,
        buffer_size=learning_starts + steps,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return sb3_rate(model, env, step_clock(learning_starts), learning_starts + steps, steps)


def sac_limit(learning_starts: int, seed: int, n: int = 200) -> dict[str, np.ndarray]:
    agent, sampler, algo = build_ours_sac(learning_starts, seed)
    for itr in range(learning_starts + 1):  # fill the replay; the last call makes the first update
        algo.optimize(itr, sampler.sample(itr)[0])
    sampler.shutdown()
    batches = [algo.replay.sample(SAC_BATCH, agent.device) for _ in range(n)]
    start = clocks()
    for batch in batches:
        algo.update(batch)
    t_update = (clocks() - start) / n  # replay sampling excluded here, included below
    start = clocks()
    for _ in range(n):
        algo.replay.sample(SAC_BATCH, agent.device)
    t_update += (clocks() - start) / n
    agent.set_mode("sample", 10**9)
    obs = batches[0].observation[:1]
    start = clocks()
    for _ in range(n):
        agent.step(obs, None, None, None)
    t_act = (clocks() - start) / n
    env = make_vec_env(HALFCHEETAH, 1, seed)
    env.reset()
    actions = np.random.default_rng(seed).uniform(-1, 1, size=(5 * n, 1, 6)).astype(np.float32)
    start = clocks()
    for a in actions:
        env.step(a)
    t_env = (clocks() - start) / (5 * n)
    env.close()
    limit = 1.0 / (t_update + t_act + t_env)
    return {"t_act_s": t_act, "t_env_s": t_env, "t_learn_s": t_update, "limit_steps_per_s": limit}


# --- main ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads for both (default: all cores)"
    )
    parser.add_argument("--ppo-iterations", type=int, default=2, help="timed PPO batches of 128 x 8 steps")
    parser.add_argument("--sac-steps", type=int, default=1000, help="timed SAC env steps")
    parser.add_argument("--sac-learning-starts", type=int, default=1000, help="untimed SAC steps first")
    parser.add_argument("--only", choices=("ppo", "sac"), default=None)
    args = parser.parse_args()
    if min(args.repeats, args.threads, args.ppo_iterations, args.sac_steps) < 1:
        parser.error("--repeats, --threads, --ppo-iterations and --sac-steps must be >= 1")
    if args.sac_learning_starts < SAC_BATCH:
        parser.error(f"--sac-learning-starts must be >= the batch size {SAC_BATCH}")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    timers = {
        "ppo": {
            "ours": lambda seed: time_ours_ppo(args.ppo_iterations, seed),
            "sb3": lambda seed: time_sb3_ppo(args.ppo_iterations, seed),
        },
        "sac": {
            "ours": lambda seed: time_ours_sac(args.sac_steps, args.sac_learning_starts, seed),
            "sb3": lambda seed: time_sb3_sac(args.sac_steps, args.sac_learning_starts, seed),
        },
    }
    configs = [args.only] if args.only else ["ppo", "sac"]
    rows = []
    for config in configs:
        for repeat in range(args.repeats):
            for impl, fn in timers[config].items():
                wall, cpu = fn(repeat)
                rows.append(
                    {
                        "config": config,
                        "impl": impl,
                        "repeat": repeat,
                        "steps_per_second": wall,
                        "steps_per_cpu_second": cpu,
                    }
                )
                print(
                    f"{config} {impl} repeat {repeat}: {wall:.1f} steps/s, {cpu:.1f} steps/CPU-s", flush=True
                )
    limits = {
        "ppo": lambda: ppo_limit(seed=0),
        "sac": lambda: sac_limit(args.sac_learning_starts, seed=0),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["config", "impl", "repeat", *COLUMNS])
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# PPO (Pong) and SAC (HalfCheetah-v5): training throughput (env steps/s)",
        "",
        f"Machine: {cpu_model()}, torch threads {args.threads}; median of {args.repeats} repeats. "
        f"PPO: {PPO_B} envs x {PPO_T} steps, {PPO_EPOCHS} epochs, minibatch {PPO_MINIBATCH}, "
        f"{args.ppo_iterations} timed batches. SAC: batch {SAC_BATCH}, {args.sac_steps} timed steps after "
        f"{args.sac_learning_starts}. 1-minute load average {load_before:.2f} at the start.",
        "",
        "| config | per | ours (median) | SB3 (median) | ours / SB3 | paired ratio [95% CI] | t_act (ms) "
        "| t_env (ms) | t_learn (ms) | machine limit | ours / limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        mine, theirs = (
            [r for r in rows if r["config"] == config and r["impl"] == impl] for impl in ("ours", "sb3")
        )
        ours, sb3 = (
            np.array([statistics.median(r[c] for r in runs) for c in COLUMNS]) for runs in (mine, theirs)
        )
        paired = [paired_ratio([r[c] for r in mine], [r[c] for r in theirs]) for c in COLUMNS]
        costs = limits[config]()
        limit = costs["limit_steps_per_s"]
        for k, per in enumerate(("wall-clock s", "CPU s")):
            median, low, high = paired[k]
            lines.append(
                f"| {config} | {per} | {ours[k]:.1f} | {sb3[k]:.1f} | {ours[k] / sb3[k]:.2f} | "
                f"{median:.2f} [{low:.2f}, {high:.2f}] | "
                f"{1e3 * costs['t_act_s'][k]:.2f} | {1e3 * costs['t_env_s'][k]:.2f} | "
                f"{1e3 * costs['t_learn_s'][k]:.1f} | {limit[k]:.1f} | {ours[k] / limit[k]:.2f} |"
            )
    lines += [
        "",
        "t_learn: one PPO optimize call on a 128 x 8 batch (all epochs); one SAC update and replay draw.",
        "PPO limit = T*B / (T*(t_act + t_env) + t_learn); SAC limit = 1 / (t_act + t_env + t_learn).",
        f"1-minute load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
    ]
    summary = "\n".join(lines)
    args.out.with_suffix(".md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
