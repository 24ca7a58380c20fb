"""DQN training throughput on Pong: this code base against Stable-Baselines3, same machine, same run.

Both run Nature DQN's training loop (Mnih et al. 2015, Extended Data Table 1; this code base: the
setting ``dqn_sb3_speed``, ``dqn_nature`` with SB3's defaults where they differ): one env, minibatch
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
repeats: on a shared machine single repeats' ratios spread by +-20%, so a target such as
1.3x is shown only where the CI's lower bound clears it (``--repeats 9`` or more for a usable CI).

Torch threads: all the machine's cores by default (the setting of the reference figure, SB3
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

import os

import numpy as np
import torch

from algorithms.algos import dqn
from algorithms.envs.config import EnvConfig
from algorithms.learners.q_replay import LossMode
from bench import outputs, speed
from repro.settings import setting_configs

# Nature DQN with SB3's DQN defaults where they differ (the file says which, with their sources).
SETTING = "dqn_sb3_speed"
PEER = setting_configs(SETTING)["algo"]
# Nature's minibatch 32 and update every 4 env steps are also SB3 DQN's defaults (batch_size=32,
# train_freq=4).
TRAIN_FREQ, BATCH_SIZE = PEER.env_steps_per_update, PEER.batch_size
# SB3's target_update_interval counts env steps: the setting's updates at one per TRAIN_FREQ steps.
TARGET_UPDATE_STEPS = PEER.target_update_period_updates * TRAIN_FREQ
ENV = EnvConfig(id="pong", kind="atari", backend="native", num_threads=1)


def ours_config(replay_size: int, learning_starts: int, total_steps: int) -> dqn.Config:
    """The setting with the bench's replay sizes and SB3's exploration schedule for this run's length."""
    overrides = {
        "algo.replay_size_steps": replay_size,
        "algo.learning_starts_steps": learning_starts,
        # SB3 DQN's exploration_fraction default 0.1: epsilon is final after a tenth of the run.
        "algo.eps_decay_steps": total_steps // 10,
    }
    return setting_configs(SETTING, overrides)["algo"]


def build_ours(replay_size: int, learning_starts: int, seed: int, total_steps: int):
    config = ours_config(replay_size, learning_starts, total_steps)
    return speed.build_serial(dqn, config, ENV, TRAIN_FREQ, 1, seed)


def time_ours(steps: int, replay_size: int, learning_starts: int, seed: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of sample + optimize after ``learning_starts`` untimed steps."""
    agent, sampler, algo = build_ours(replay_size, learning_starts, seed, learning_starts + steps)
    rate = speed.train_rate(agent, sampler, algo, learning_starts // TRAIN_FREQ, steps // TRAIN_FREQ)
    if algo.updates < steps // TRAIN_FREQ:
        raise RuntimeError(f"ours: only {algo.updates} updates ran in the timed window")
    return rate


def time_sb3(steps: int, replay_size: int, learning_starts: int, seed: int) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of SB3's DQN ``learn`` after ``learning_starts`` untimed
    steps."""
    from stable_baselines3 import DQN

    return speed.sb3_learn_rate(
        DQN,
        "CnnPolicy",
        ENV,
        1,
        seed,
        speed.step_clock(learning_starts),
        learning_starts + steps,
        steps,
        buffer_size=replay_size,
        learning_starts=learning_starts,
        batch_size=BATCH_SIZE,
        train_freq=TRAIN_FREQ,
        gradient_steps=1,
        target_update_interval=TARGET_UPDATE_STEPS,
        optimize_memory_usage=True,
        replay_buffer_kwargs={"handle_timeout_termination": False},
    )


def machine_limit(replay_size: int, learning_starts: int, seed: int, n: int = 200) -> dict[str, np.ndarray]:
    """Measured t_update, t_act, t_env (seconds) and the implied limit in env steps per second, each
    as (wall-clock, CPU)."""
    agent, sampler, algo = build_ours(replay_size, learning_starts, seed, learning_starts)
    for itr in range(learning_starts // TRAIN_FREQ):  # fill the replay
        algo.optimize(itr, sampler.sample(itr)[0])
    sampler.shutdown()
    replay, model = algo.replay, algo.model

    def update() -> None:
        data, _, weights = replay.sample(BATCH_SIZE)
        batch = data.replace(is_weights=weights)
        loss, _, _ = algo.loss_fn(algo.config, model, algo.target_model, batch, LossMode())
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), algo.clip_grad_norm)
        algo.optimizer.step()

    t_update = speed.per_call_seconds(update, n)
    agent.set_mode("train", 10**9)  # epsilon 0: every call runs the net, as a greedy action does
    obs = replay.sample(BATCH_SIZE)[0].observation[:1]
    zeros = torch.zeros(1, dtype=torch.long)
    t_act = speed.per_call_seconds(lambda: agent.step(obs, zeros, torch.zeros(1), None), n)
    actions = np.random.default_rng(seed).integers(0, agent.action_space.n, size=(5 * n, 1))
    t_env = speed.env_step_seconds(ENV, actions, seed)
    limit = 1.0 / (t_update / TRAIN_FREQ + t_act + t_env)
    return {"t_update_s": t_update, "t_act_s": t_act, "t_env_s": t_env, "limit_steps_per_s": limit}


def main() -> None:
    parser = speed.speed_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="timed env steps per repeat")
    parser.add_argument("--learning-starts", type=int, default=1000, help="untimed env steps before training")
    parser.add_argument("--replay-size", type=int, default=50_000)
    args = speed.parse_args(parser, ("steps", "learning_starts", "replay_size", "repeats", "threads"))
    if args.learning_starts < BATCH_SIZE or args.steps % TRAIN_FREQ or args.learning_starts % TRAIN_FREQ:
        parser.error(f"--learning-starts must be >= {BATCH_SIZE}; both step counts multiples of {TRAIN_FREQ}")
    load_before = os.getloadavg()[0]
    sizes = (args.steps, args.replay_size, args.learning_starts)
    timers = {"ours": lambda seed: time_ours(*sizes, seed), "sb3": lambda seed: time_sb3(*sizes, seed)}
    rows = speed.interleaved_repeats(timers, args.repeats, {})
    costs = machine_limit(args.replay_size, args.learning_starts, seed=0)
    load_after = os.getloadavg()[0]
    mine, theirs = speed.runs_of(rows, "ours"), speed.runs_of(rows, "sb3")
    ours, sb3 = speed.medians(mine), speed.medians(theirs)
    paired = speed.paired_ratios(mine, theirs)  # [column, (median, CI low, CI high)]
    outputs.write_rows(args.out, rows, ["impl", "repeat", *speed.RATES])

    def row(name: str, values: np.ndarray, fmt: str) -> str:
        return f"| {name} | {values[0]:{fmt}} | {values[1]:{fmt}} |"

    limit = costs["limit_steps_per_s"]
    summary = "\n".join(
        [
            "# DQN on Pong: training throughput (env steps/s)",
            "",
            f"Machine: {speed.cpu_model()}, torch threads {args.threads}; replay {args.replay_size}, "
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
    outputs.write_summary(args.out, summary)


if __name__ == "__main__":
    main()
