"""DQN training throughput on Pong: this code base against Stable-Baselines3, same machine, same run.

Both run Nature DQN's training loop (Mnih et al. 2015, Extended Data Table 1): one env, minibatch
32, one update every 4 env steps, the Nature network, the same replay capacity, the same torch
thread count and the same env object: this code base's native ale-py env (frameskip 4 with
max-pool, 84x84 gray, 4-frame stack, up to 30 no-ops), handed to SB3 through its ``VecEnv``
interface. Both optimise with Adam at SB3's DQN defaults (learning rate 1e-4, eps 1e-8) rather
than the Nature paper's centered RMSprop, so the two do the same arithmetic; this code base runs
torch's fused Adam kernel, SB3 the per-tensor default. Both explore on SB3's DQN schedule (epsilon
1 -> 0.05 over the first tenth of the run, so 0.05 while timed): an epsilon-greedy actor skips the
network on steps where it explores (both libraries do), so unequal epsilons would time unequal
work. Each repeat builds a fresh learner, fills ``--learning-starts`` steps (not timed), then times
``--steps`` env steps of training; the figure is env steps per second. Reported: every repeat in
the CSV, the median of the repeats and two ratios in a Markdown summary: that of the medians, and
the median of each repeat's ratio (the two learners of a repeat run back to back, so load drifts
on a shared machine hit both alike), with a 95% percentile-bootstrap CI of that median over the
repeats: on a shared machine single repeats' ratios spread by +-20%, so a target such as issue 3's
1.3x is shown only where the CI's lower bound clears it (``--repeats 9`` or more for a usable CI).

Torch threads: all the machine's cores by default (the setting of issue 3's reference figure, SB3
at about 116 steps/s here), ``--threads 1`` for one. Every figure is given twice: per second of
wall-clock time and per second of this process's CPU time (``time.process_time``, all its
threads). With one thread on an idle machine the two agree; with more, CPU seconds add up over the
threads; on a shared machine the wall-clock figure also counts the time other jobs held the cores.

The machine's limit for this configuration comes from costs measured in the same run:
one update of the Nature net on a replay minibatch (``t_update``, replay sampling included), one
greedy action on one observation (``t_act``) and one env step (``t_env``):

    limit = 1 / (t_update / train_freq + t_act + t_env)  [env steps per second]

    python -m bench.bench_dqn_speed --out runs/bench/dqn_speed.csv [--steps 2000] [--repeats 3]
        [--replay-size 50000] [--threads N (default: all cores)]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.algos import dqn
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.samplers.base import BatchSpec
from algorithms.samplers.serial import SerialSampler
from algorithms.train import SamplerConfig
from bench.bench_env import cpu_model
from bench.learning import paired_ratio

TRAIN_FREQ = 4
BATCH_SIZE = 32
ENV = EnvConfig(id="pong", kind="atari", backend="native", num_threads=1)


def ours_config(replay_size: int, learning_starts: int, total_steps: int) -> dqn.Config:
    return dqn.Config(
        batch_size=BATCH_SIZE,
        train_every_steps=TRAIN_FREQ,
        replay_size_steps=replay_size,
        learning_starts_steps=learning_starts,
        clip_grad_norm=10.0,  # SB3's default max_grad_norm, so both compute the gradient norm
        optimizer="adam",  # SB3 DQN's default optimizer, learning rate and eps
        learning_rate=1e-4,
        optimizer_eps=1e-8,
        # SB3 DQN's exploration defaults: 1.0 -> 0.05 over exploration_fraction 0.1 of the run.
        eps_start=1.0,
        eps_final=0.05,
        eps_decay_steps=total_steps // 10,
    )


def build_ours(replay_size: int, learning_starts: int, seed: int, total_steps: int):
    torch.manual_seed(seed)
    config = ours_config(replay_size, learning_starts, total_steps)
    env = make_vec_env(ENV, 1, seed)
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    agent = dqn.build_agent(config, observation_space, action_space)
    sampler = SerialSampler(ENV, agent, SamplerConfig(batch_T=TRAIN_FREQ, batch_B=1), seed)
    sampler.initialize()
    algo = dqn.Algo(config, agent, ENV.env_frameskip, BatchSpec(TRAIN_FREQ, 1))
    return agent, sampler, algo


def clocks() -> np.ndarray:
    """(wall-clock, CPU) time now in seconds."""
    return np.array([time.perf_counter(), time.process_time()])


def time_ours(steps: int, replay_size: int, learning_starts: int, seed: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of sample + optimize after ``learning_starts`` untimed steps."""
    agent, sampler, algo = build_ours(replay_size, learning_starts, seed, learning_starts + steps)
    itr = 0

    def run(n_steps: int) -> None:
        nonlocal itr
        for _ in range(n_steps // TRAIN_FREQ):
            agent.set_mode("sample", itr * TRAIN_FREQ)
            samples, _ = sampler.sample(itr)
            agent.set_mode("train", itr * TRAIN_FREQ)
            algo.optimize(itr, samples)
            itr += 1

    run(learning_starts)
    start = clocks()
    run(steps)
    elapsed = clocks() - start
    sampler.shutdown()
    if algo.updates < steps // TRAIN_FREQ:
        raise RuntimeError(f"ours: only {algo.updates} updates ran in the timed window")
    return steps / elapsed


def sb3_vec_env(env_config: EnvConfig, num_envs: int, seed: int):
    """This code base's ``num_envs`` vector env behind SB3's ``VecEnv`` interface (same emulator or
    simulator and preprocessing for both learners; SB3's AtariWrapper would also need OpenCV)."""
    from stable_baselines3.common.vec_env import VecEnv

    class NativeVecEnv(VecEnv):
        def __init__(self) -> None:
            self.env = make_vec_env(env_config, num_envs, seed)
            super().__init__(num_envs, self.env.observation_space, self.env.action_space)

        def reset(self):
            return self.env.reset()

        def step_async(self, actions) -> None:
            self.env.send_step(np.asarray(actions))

        def step_wait(self):
            out = self.env.receive_step()
            done = out.terminated | out.truncated
            infos = [
                {"TimeLimit.truncated": bool(out.truncated[i] and not out.terminated[i])}
                | ({"terminal_observation": out.final_observation[i]} if done[i] else {})
                for i in range(num_envs)
            ]
            return out.observation, out.reward, done, infos

        def close(self) -> None:
            self.env.close()

        def get_attr(self, attr_name, indices=None):
            return [getattr(self, attr_name)] * num_envs

        def set_attr(self, attr_name, value, indices=None) -> None:
            setattr(self, attr_name, value)

        def env_method(self, method_name, *args, indices=None, **kwargs):
            # SB3 calls it only to render; the sub-envs are not Python objects one could call.
            raise NotImplementedError(f"sb3_vec_env: env_method({method_name!r}) is not supported")

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False] * num_envs

    return NativeVecEnv()


def step_clock(start_at: int):
    """An SB3 callback recording, in ``.start``, when the run reaches env step ``start_at``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = None

        def _on_step(self) -> bool:
            if self.num_timesteps == start_at:
                self.start = clocks()
            return True

    return Clock()


def sb3_rate(model, env, clock, total_timesteps: int, timed_steps: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of ``model.learn`` over the ``timed_steps`` after
    ``clock`` started (a ``step_clock`` or a rollout clock); closes ``env``."""
    model.learn(total_timesteps=total_timesteps, callback=clock)
    elapsed = clocks() - clock.start
    env.close()
    return timed_steps / elapsed


def time_sb3(steps: int, replay_size: int, learning_starts: int, seed: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of SB3's DQN ``learn`` after ``learning_starts`` untimed
    steps."""
    from stable_baselines3 import DQN

    env = sb3_vec_env(ENV, 1, seed)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=replay_size,
        learning_starts=learning_starts,
        batch_size=BATCH_SIZE,
        train_freq=TRAIN_FREQ,
        gradient_steps=1,
        target_update_interval=10_000,
        optimize_memory_usage=True,
        replay_buffer_kwargs={"handle_timeout_termination": False},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return sb3_rate(model, env, step_clock(learning_starts), learning_starts + steps, steps)


def machine_limit(replay_size: int, learning_starts: int, seed: int, n: int = 200) -> dict[str, np.ndarray]:
    """Measured t_update, t_act, t_env (seconds) and the implied limit in env steps per second, each
    as (wall-clock, CPU)."""
    agent, sampler, algo = build_ours(replay_size, learning_starts, seed, learning_starts)
    for itr in range(learning_starts // TRAIN_FREQ):  # fill the replay
        algo.optimize(itr, sampler.sample(itr)[0])
    sampler.shutdown()
    replay, model = algo.replay, algo.model
    start = clocks()
    for _ in range(n):
        data, indices, weights = replay.sample(BATCH_SIZE)
        loss, _, _ = algo.loss(data.replace(is_weights=weights))
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), algo.clip_grad_norm)
        algo.optimizer.step()
    t_update = (clocks() - start) / n
    agent.set_mode("train", 10**9)  # epsilon 0: every call runs the net, as a greedy action does
    obs = data.observation[:1]
    zeros = torch.zeros(1, dtype=torch.long)
    start = clocks()
    for _ in range(n):
        agent.step(obs, zeros, torch.zeros(1), None)
    t_act = (clocks() - start) / n
    env = make_vec_env(ENV, 1, seed)
    env.reset()
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, size=(5 * n, 1))
    start = clocks()
    for a in actions:
        env.step(a)
    t_env = (clocks() - start) / (5 * n)
    env.close()
    limit = 1.0 / (t_update / TRAIN_FREQ + t_act + t_env)
    return {"t_update_s": t_update, "t_act_s": t_act, "t_env_s": t_env, "limit_steps_per_s": limit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=2000, help="timed env steps per repeat")
    parser.add_argument("--learning-starts", type=int, default=1000, help="untimed env steps before training")
    parser.add_argument("--replay-size", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads for both (default: all cores)"
    )
    args = parser.parse_args()
    if min(args.steps, args.learning_starts, args.replay_size, args.repeats, args.threads) < 1:
        parser.error("--steps, --learning-starts, --replay-size, --repeats and --threads must be >= 1")
    if args.learning_starts < BATCH_SIZE or args.steps % TRAIN_FREQ or args.learning_starts % TRAIN_FREQ:
        parser.error(f"--learning-starts must be >= {BATCH_SIZE}; both step counts multiples of {TRAIN_FREQ}")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    rows = []
    for repeat in range(args.repeats):
        for name, fn in (("ours", time_ours), ("sb3", time_sb3)):
            wall, cpu = fn(args.steps, args.replay_size, args.learning_starts, seed=repeat)
            rows.append(
                {"impl": name, "repeat": repeat, "steps_per_second": wall, "steps_per_cpu_second": cpu}
            )
            print(f"{name} repeat {repeat}: {wall:.1f} steps/s, {cpu:.1f} steps/CPU-s", flush=True)
    costs = machine_limit(args.replay_size, args.learning_starts, seed=0)
    load_after = os.getloadavg()[0]
    columns = ("steps_per_second", "steps_per_cpu_second")
    mine, theirs = ([r for r in rows if r["impl"] == impl] for impl in ("ours", "sb3"))  # in repeat order
    ours, sb3 = (
        np.array([statistics.median(r[c] for r in runs) for c in columns]) for runs in (mine, theirs)
    )
    paired = np.array(  # [column, (median, CI low, CI high)]
        [paired_ratio([r[c] for r in mine], [r[c] for r in theirs]) for c in columns]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["impl", "repeat", *columns])
        writer.writeheader()
        writer.writerows(rows)

    def row(name: str, values: np.ndarray, fmt: str) -> str:
        return f"| {name} | {values[0]:{fmt}} | {values[1]:{fmt}} |"

    limit = costs["limit_steps_per_s"]
    summary = "\n".join(
        [
            "# DQN on Pong: training throughput (env steps/s)",
            "",
            f"Machine: {cpu_model()}, torch threads {args.threads}; replay {args.replay_size}, "
            f"batch {BATCH_SIZE}, one update per {TRAIN_FREQ} steps, {args.steps} timed steps after "
            f"{args.learning_starts}, median of {args.repeats}. 1-minute load average "
            f"{load_before:.2f} at the start, {load_after:.2f} at the end.",
            "",
            "| quantity | per wall-clock second | per CPU second |",
            "|---|---|---|",
            row("ours (median)", ours, ".1f"),
            row("SB3 (median)", sb3, ".1f"),
            row("ours / SB3 (ratio of the medians)", ours / sb3, ".2f"),
            row("ours / SB3 (median of the repeats' ratios)", paired[:, 0], ".2f"),
            f"| that median's 95% bootstrap CI over the repeats | [{paired[0, 1]:.2f}, "
            f"{paired[0, 2]:.2f}] | [{paired[1, 1]:.2f}, {paired[1, 2]:.2f}] |",
            row("t_update (ms)", 1e3 * costs["t_update_s"], ".2f"),
            row("t_act (ms)", 1e3 * costs["t_act_s"], ".3f"),
            row("t_env (ms)", 1e3 * costs["t_env_s"], ".3f"),
            row(f"machine limit 1/(t_update/{TRAIN_FREQ} + t_act + t_env)", limit, ".1f"),
            row("ours / limit", ours / limit, ".2f"),
            "",
        ]
    )
    args.out.with_suffix(".md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
