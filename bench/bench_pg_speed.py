"""PPO and SAC training throughput: this code base against Stable-Baselines3, same machine, same run.

* PPO on Pong: 8 envs x 128 steps per batch, 4 epochs of minibatch 256, the Nature network
  (shared torso), no value clipping, for both: the peer's own Atari setting, ``ppo_atari_zoo``
  (rl-baselines3-zoo), loaded by name; ``--ppo-iterations`` timed batches after one untimed batch.
* SAC on HalfCheetah-v5: one env, batch 256, one update per env step, 256-256 networks (the SAC
  defaults of both libraries; this code base: the setting ``sac``); ``--sac-steps`` timed env
  steps after ``--sac-learning-starts`` untimed ones (uniform-random actions, no updates).

Both learners step the very same env objects: this code base's vector envs, handed to SB3 through
its ``VecEnv`` interface (``sb3_vec_env``), with the same torch thread count (all cores by default,
``--threads 1`` for one), so only the learners differ. The figure is env steps per second of
sampling + learning; every repeat goes to the CSV, the median of the repeats and two ratios to the
Markdown summary: that of the medians, and the median of the repeats' own ratios (the two learners
of a repeat run back to back) with its 95% bootstrap CI over the repeats. Every figure is given per
second of wall-clock time and per second of this process's CPU time (``time.process_time``, all
threads): on an idle machine they agree; on a shared one the wall-clock figure also counts the time
other jobs held the cores, and the CPU-time figure compares the learners' work.

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

import dataclasses
import os

import numpy as np
import torch

from algorithms.algos import ppo, sac
from algorithms.envs.config import EnvConfig
from bench import outputs, speed
from repro.settings import setting_configs

PONG = EnvConfig(id="pong", kind="atari", backend="native", clip_rewards=True)
HALFCHEETAH = EnvConfig(id="HalfCheetah-v5", kind="gym")
# The peer's own Atari setting (rl-baselines3-zoo's; it differs from Schulman et al. 2017, Table 5,
# the setting ppo_atari, in 4 epochs instead of 3 and no value clipping).
PPO_CONFIGS = setting_configs("ppo_atari_zoo")
PPO_T, PPO_B = PPO_CONFIGS["sampler"].batch_T, PPO_CONFIGS["sampler"].batch_B
# Haarnoja et al. 2018b, Table 1; its batch 256 and 256-256 networks are SB3 SAC's defaults too.
SAC_CONFIG = setting_configs("sac")["algo"]
SAC_BATCH = SAC_CONFIG.batch_size


# --- PPO ----------------------------------------------------------------------------------------------


def ppo_config() -> ppo.Config:
    return PPO_CONFIGS["algo"]


def build_ours_ppo(seed: int):
    return speed.build_serial(ppo, ppo_config(), PONG, PPO_T, PPO_B, seed)


def time_ours_ppo(iterations: int, seed: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of ``iterations`` batches after one untimed batch
    (allocation, first-call overheads)."""
    return speed.train_rate(*build_ours_ppo(seed), 1, iterations)


def time_sb3_ppo(iterations: int, seed: int) -> np.ndarray:
    from stable_baselines3 import PPO

    c = ppo_config()
    steps = iterations * PPO_T * PPO_B
    return speed.sb3_learn_rate(
        PPO,
        "CnnPolicy",
        PONG,
        PPO_B,
        seed,
        speed.rollout_clock(1),
        steps + PPO_T * PPO_B,
        steps,
        n_steps=PPO_T,
        batch_size=c.minibatch_size_steps,
        n_epochs=c.epochs,
        learning_rate=c.learning_rate,
        clip_range=c.clip_epsilon,
        clip_range_vf=c.clip_epsilon if c.clip_value_loss else None,
        vf_coef=c.value_coef,
        ent_coef=c.entropy_coef,
        max_grad_norm=c.clip_grad_norm,
        gamma=c.discount,
        gae_lambda=c.gae_lambda,
    )


def ppo_limit(seed: int, n: int = 50) -> dict[str, np.ndarray]:
    agent, sampler, algo = build_ours_ppo(seed)
    samples, _ = sampler.sample(0)
    sampler.shutdown()
    obs = samples.observation[0]
    zeros = torch.zeros(PPO_B, dtype=torch.long)
    agent.set_mode("sample", 0)
    t_act = speed.per_call_seconds(lambda: agent.step(obs, zeros, torch.zeros(PPO_B), None), n)
    actions = np.random.default_rng(seed).integers(0, agent.action_space.n, size=(4 * n, PPO_B))
    t_env = speed.env_step_seconds(PONG, actions, seed)
    algo.optimize(0, samples)  # first call (allocations) untimed
    t_optimize = speed.per_call_seconds(lambda: algo.optimize(1, samples), 1)
    limit = PPO_T * PPO_B / (PPO_T * (t_act + t_env) + t_optimize)
    return {"t_act_s": t_act, "t_env_s": t_env, "t_learn_s": t_optimize, "limit_steps_per_s": limit}


# --- SAC ----------------------------------------------------------------------------------------------


def sac_config(learning_starts: int) -> sac.Config:
    return dataclasses.replace(
        SAC_CONFIG, random_steps=learning_starts, learning_starts_steps=learning_starts
    )


def build_ours_sac(learning_starts: int, seed: int):
    return speed.build_serial(sac, sac_config(learning_starts), HALFCHEETAH, 1, 1, seed)


def time_ours_sac(steps: int, learning_starts: int, seed: int) -> np.ndarray:
    return speed.train_rate(*build_ours_sac(learning_starts, seed), learning_starts, steps)


def time_sb3_sac(steps: int, learning_starts: int, seed: int) -> np.ndarray:
    from stable_baselines3 import SAC

    return speed.sb3_learn_rate(
        SAC,
        "MlpPolicy",
        HALFCHEETAH,
        1,
        seed,
        speed.step_clock(learning_starts),
        learning_starts + steps,
        steps,
        batch_size=SAC_BATCH,
        learning_starts=learning_starts,
        buffer_size=learning_starts + steps,
    )


def sac_limit(learning_starts: int, seed: int, n: int = 200) -> dict[str, np.ndarray]:
    agent, sampler, algo = build_ours_sac(learning_starts, seed)
    for itr in range(learning_starts + 1):  # fill the replay; the last call makes the first update
        algo.optimize(itr, sampler.sample(itr)[0])
    sampler.shutdown()
    batches = [algo.replay.sample(SAC_BATCH, agent.device) for _ in range(n)]
    unused = iter(batches)
    t_update = speed.per_call_seconds(lambda: algo.update(next(unused)), n)  # replay sampling excluded here
    t_update += speed.per_call_seconds(lambda: algo.replay.sample(SAC_BATCH, agent.device), n)  # and added
    agent.set_mode("sample", 10**9)
    obs = batches[0].observation[:1]
    t_act = speed.per_call_seconds(lambda: agent.step(obs, None, None, None), n)
    actions = np.random.default_rng(seed).uniform(-1, 1, size=(5 * n, 1, 6)).astype(np.float32)
    t_env = speed.env_step_seconds(HALFCHEETAH, actions, seed)
    limit = 1.0 / (t_update + t_act + t_env)
    return {"t_act_s": t_act, "t_env_s": t_env, "t_learn_s": t_update, "limit_steps_per_s": limit}


# --- main ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = speed.speed_parser(__doc__.splitlines()[0])
    parser.add_argument("--ppo-iterations", type=int, default=2, help="timed PPO batches of 128 x 8 steps")
    parser.add_argument("--sac-steps", type=int, default=1000, help="timed SAC env steps")
    parser.add_argument("--sac-learning-starts", type=int, default=1000, help="untimed SAC steps first")
    parser.add_argument("--only", choices=("ppo", "sac"), default=None)
    args = speed.parse_args(parser, ("repeats", "threads", "ppo_iterations", "sac_steps"))
    if args.sac_learning_starts < SAC_BATCH:
        parser.error(f"--sac-learning-starts must be >= the batch size {SAC_BATCH}")
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
    rows = [
        row
        for config in configs
        for row in speed.interleaved_repeats(timers[config], args.repeats, {"config": config})
    ]
    limits = {
        "ppo": lambda: ppo_limit(seed=0),
        "sac": lambda: sac_limit(args.sac_learning_starts, seed=0),
    }
    outputs.write_rows(args.out, rows, ["config", "impl", "repeat", *speed.RATES])
    c = ppo_config()
    lines = [
        "# PPO (Pong) and SAC (HalfCheetah-v5): training throughput (env steps/s)",
        "",
        f"Machine: {speed.cpu_model()}, torch threads {args.threads}; median of {args.repeats} repeats. "
        f"PPO: {PPO_B} envs x {PPO_T} steps, {c.epochs} epochs, minibatch {c.minibatch_size_steps}, "
        f"{args.ppo_iterations} timed batches. SAC: batch {SAC_BATCH}, {args.sac_steps} timed steps after "
        f"{args.sac_learning_starts}. 1-minute load average {load_before:.2f} at the start.",
        "",
        "| config | per | ours (median) | SB3 (median) | ours / SB3 | paired ratio [95% CI] | t_act (ms) "
        "| t_env (ms) | t_learn (ms) | machine limit | ours / limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in configs:
        of_config = [r for r in rows if r["config"] == config]
        mine, theirs = speed.runs_of(of_config, "ours"), speed.runs_of(of_config, "sb3")
        ours, sb3 = speed.medians(mine), speed.medians(theirs)
        paired = speed.paired_ratios(mine, theirs)
        costs = limits[config]()
        limit = costs["limit_steps_per_s"]
        for k, per in enumerate(("wall-clock s", "CPU s")):
            lines.append(
                f"| {config} | {per} | {ours[k]:.1f} | {sb3[k]:.1f} | {ours[k] / sb3[k]:.2f} | "
                f"{speed.ratio_with_ci(paired[k])} | "
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
    outputs.write_summary(args.out, "\n".join(lines))


if __name__ == "__main__":
    main()
