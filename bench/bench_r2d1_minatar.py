"""R2D1 on MinAtar: this code base's job loop against a plain-PyTorch floor of the same work.

``ours`` is the setting ``r2d1_minatar_corrected`` (loaded by name, ``paper`` profile, the game set
per run) through the synchronous runner (``SyncRunner.iteration``, the training loop of
``python -m repro``, with no run directory), at the setting's scale: 16 envs stepped in batches of
``sampler.batch_T`` steps, one update of ``batch_size_sequences`` sequences of burn-in + trained +
n-step steps per ``batch_size_sequences x sequence_length_steps`` trained steps owed at the replay
ratio (at the frozen scale, 32 sequences of 5 + 10 + 5 steps per 320 trained steps at 25.6, i.e. one
update per 12.5 env steps), prioritized sequence replay with sampler-side initial priorities.

``plain`` is the same work written as plain PyTorch and numpy with nothing around it: the same 16
envs (``make_vec_env``, so the env cost is the same object code on both sides), one batched acting
forward per step under ``torch.inference_mode`` with Ape-X epsilons drawn in one numpy call, the
steps written into numpy rings, and the same update at the same rate: the same network (Young &
Tian's convolution, the setting's layer before the LSTM, LSTM 128, dueling 128), burn-in of the
online and target nets from the stored state (the target net in one pass over the sequence, the
online net's burn-in and n bootstrap steps without gradient), n-step double Q-learning with value
rescaling, the squared TD loss, Adam with gradient-norm clipping, a target copy every 100 updates.
It leaves out what any implementation could drop: the priorities (uniform sequence draws), the checks and
bookkeeping, and it runs each LSTM pass as one fused ``nn.LSTM`` call straight through the episode
starts inside a sequence (rlpyt's R2D1 did the same and masked the loss) where this code base resets
the state there, as R2D2 does: so the floor is below what the same math costs
(docs/results/r2d1_minatar_speed.md).

Timed per repeat, each implementation in a fresh child process, the two interleaved, the order
alternating from repeat to repeat (``bench.speed``): the job's CPU seconds from process start to
its first env step (``startup``), env steps per (wall, CPU) second over ``--steps`` env steps after
the first update (the job loop, learning on), and the CPU milliseconds of one update, alone, over
``--updates`` updates. Reported: every repeat in the CSV, medians, and the median of the repeats'
paired ratios with its 95% bootstrap CI (``bench.speed.paired_ratios``) in a Markdown summary.

    python -m bench.bench_r2d1_minatar --out docs/results/r2d1_minatar_bench.csv [--game breakout]
        [--steps 6400] [--updates 20] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from algorithms.envs.minatar import MINATAR_GAMES
from bench import outputs, speed

SETTING = "r2d1_minatar_corrected"
IMPLS = ("ours", "plain")
COLUMNS = (*speed.GAME_RUN_COLUMNS, "startup_cpu_seconds", *speed.RATES, "update_cpu_ms")


def setting_config(game: str, seed: int):
    """The setting's ``TrainConfig`` for MinAtar game ``game`` and run seed ``seed``."""
    from bench.bench_minatar_dqn import setting_config as minatar_setting_config

    return minatar_setting_config(game, seed, SETTING)


def update_cpu_ms(update, n: int) -> float:
    """CPU milliseconds per call of ``update`` over ``n`` calls."""
    return float(speed.per_call_seconds(update, n)[1] * 1e3)


def timed_loop(iteration, env_steps, steps: int) -> np.ndarray:
    """(wall, CPU) seconds of ``iteration`` calls until ``env_steps()`` has grown by ``steps``."""
    start, first = speed.clocks(), env_steps()
    while env_steps() < first + steps:
        iteration()
    return speed.clocks() - start


def ours_rate(game: str, steps: int, updates: int, seed: int, threads: int) -> dict[str, float]:
    """In a fresh process: this code base's job loop (module docstring)."""
    from algorithms.process import configure_process
    from algorithms.runners.sync import SyncRunner

    configure_process(threads)
    config = setting_config(game, seed)
    runner = SyncRunner.build(config, None, None)
    counters, algo = runner.counters, runner.algo
    runner.sampler.initialize()
    startup = time.process_time()

    def iteration() -> None:
        runner.iteration(counters.sampler_itrs)
        runner.cross_boundaries()

    try:
        while algo.updates == 0:
            iteration()
        updates0 = algo.updates
        seconds = timed_loop(iteration, lambda: counters.env_steps, steps)
        loop_updates = algo.updates - updates0
        update_ms = update_cpu_ms(lambda: algo.learn(1), updates)
    finally:
        runner.sampler.shutdown()
    return _row(startup, steps, loop_updates, seconds, update_ms)


def _row(startup: float, steps: int, updates: int, seconds: np.ndarray, update_ms: float) -> dict[str, float]:
    return {
        "env_steps": steps,
        "updates": updates,
        "startup_cpu_seconds": round(startup, 3),
        "steps_per_second": round(steps / seconds[0], 2),
        "steps_per_cpu_second": round(steps / seconds[1], 2),
        "update_cpu_ms": round(update_ms, 2),
    }


# --- the plain floor ----------------------------------------------------------------------------------


class PlainR2D1Net(nn.Module):
    """Young & Tian's convolution -> a ReLU layer of ``fc_size`` units (0: none) -> LSTM 128 on
    [features, one-hot previous action, previous reward] -> dueling head of 128 units:
    ``forward(obs [T, B, C, 10, 10], prev_action [T, B], prev_reward [T, B], (h, c) [1, B, 128]) ->
    (q [T, B, A], (h, c))``."""

    def __init__(self, channels: int, actions: int, size: int = 128, fc_size: int = 0) -> None:
        super().__init__()
        self.actions = actions
        self.conv = nn.Conv2d(channels, 16, 3)
        self.fc = nn.Sequential(nn.Linear(16 * 8 * 8, fc_size), nn.ReLU()) if fc_size else nn.Identity()
        self.lstm = nn.LSTM((fc_size or 16 * 8 * 8) + actions + 1, size)
        self.value = nn.Sequential(nn.Linear(size, size), nn.ReLU(), nn.Linear(size, 1))
        self.advantage = nn.Sequential(nn.Linear(size, size), nn.ReLU(), nn.Linear(size, actions))

    def features(self, obs, prev_action, prev_reward):
        lead = obs.shape[: obs.dim() - 3]
        x = self.fc(self.conv(obs.reshape(-1, *obs.shape[-3:])).relu().reshape(*lead, -1))
        one_hot = nn.functional.one_hot(prev_action, self.actions).to(x.dtype)
        return torch.cat([x, one_hot, prev_reward.unsqueeze(-1)], -1)

    def head(self, out):
        advantage = self.advantage(out)
        return self.value(out) + advantage - advantage.mean(-1, keepdim=True)

    def act(self, obs, prev_action, prev_reward, state):
        """One step of B envs: ``torch.lstm_cell``, the cheapest single step (as this code base acts)."""
        lstm = self.lstm
        h, c = torch.lstm_cell(
            self.features(obs, prev_action, prev_reward),
            state,
            lstm.weight_ih_l0,
            lstm.weight_hh_l0,
            lstm.bias_ih_l0,
            lstm.bias_hh_l0,
        )
        return self.head(h), (h, c)

    def forward(self, obs, prev_action, prev_reward, state):
        out, state = self.lstm(self.features(obs, prev_action, prev_reward), state)
        return self.head(out), state


def h(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x


def h_inverse(x: torch.Tensor, eps: float) -> torch.Tensor:
    root = (torch.sqrt(1 + 4 * eps * (x.abs() + 1 + eps)) - 1) / (2 * eps)
    return torch.sign(x) * (root**2 - 1)


def plain_rate(game: str, steps: int, updates: int, seed: int, threads: int) -> dict[str, float]:
    """In a fresh process: the plain floor of the same work (module docstring)."""
    from algorithms.envs.config import EnvConfig
    from algorithms.envs.factory import make_vec_env
    from algorithms.samplers.base import env_spaces

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    c = setting_config(game, seed)
    algo, sampler = c.algo_config, c.sampler
    env_config: EnvConfig = c.env
    B, burn, L, n = sampler.batch_B, algo.burn_in_steps, algo.sequence_length_steps, algo.n_step
    seq, period, batch = burn + L + n, algo.sequence_period_steps, algo.batch_size_sequences
    envs = make_vec_env(env_config, B, seed)
    obs = envs.reset()
    A = int(env_spaces(env_config)[1].n)
    net = PlainR2D1Net(obs.shape[1], A, algo.lstm_size, algo.fc_size)
    target = copy.deepcopy(net).requires_grad_(False)
    optimizer = torch.optim.Adam(net.parameters(), lr=algo.learning_rate, eps=algo.optimizer_eps)
    epsilons = 0.4 ** (1 + 7 * np.arange(B) / (B - 1))  # Ape-X
    rows = algo.replay_size_steps // B
    ring = {
        "obs": np.zeros((rows, B, *obs.shape[1:]), obs.dtype),
        "action": np.zeros((rows, B), np.int64),
        "prev_action": np.zeros((rows, B), np.int64),
        "reward": np.zeros((rows, B), np.float32),
        "prev_reward": np.zeros((rows, B), np.float32),
        "done": np.zeros((rows, B), bool),
        "start": np.zeros((rows, B), bool),
        "h": np.zeros((rows, B, algo.lstm_size), np.float32),
        "c": np.zeros((rows, B, algo.lstm_size), np.float32),
    }
    state = (torch.zeros(B, algo.lstm_size), torch.zeros(B, algo.lstm_size))
    prev_action, prev_reward = np.zeros(B, np.int64), np.zeros(B, np.float32)
    start = np.ones(B, bool)
    t = 0
    credit = 0.0
    per_update = batch * L
    startup = time.process_time()

    def act_and_step() -> None:
        nonlocal obs, state, prev_action, prev_reward, start, t
        row = t % rows
        ring["obs"][row], ring["prev_action"][row], ring["prev_reward"][row] = obs, prev_action, prev_reward
        ring["start"][row], ring["h"][row], ring["c"][row] = start, state[0], state[1]
        with torch.inference_mode():
            q, state = net.act(
                torch.from_numpy(obs).float(),
                torch.from_numpy(prev_action),
                torch.from_numpy(prev_reward),
                state,
            )
        explore = rng.random(B) < epsilons
        action = np.where(explore, rng.integers(A, size=B), q.argmax(-1).numpy())
        step = envs.step(action)
        done = step["terminated"] | step["truncated"]
        ring["action"][row], ring["reward"][row], ring["done"][row] = action, step["reward"], done
        keep = torch.from_numpy(~done).float()[:, None]
        state = (state[0] * keep, state[1] * keep)
        obs, prev_action = step["observation"], np.where(done, 0, action)
        prev_reward, start = np.where(done, 0.0, step["reward"]).astype(np.float32), done
        t += 1

    def update() -> None:
        s = rng.integers(0, (t - seq) // period + 1, size=batch) * period
        b = rng.integers(0, B, size=batch)
        index = (s[None] + np.arange(seq)[:, None]) % rows
        get = {k: torch.from_numpy(v[index, b[None]]) for k, v in ring.items() if k not in ("h", "c")}
        h0 = (torch.from_numpy(ring["h"][s % rows, b])[None], torch.from_numpy(ring["c"][s % rows, b])[None])
        x = get["obs"].float(), get["prev_action"], get["prev_reward"]
        with torch.no_grad():
            q_target, _ = target(*x, h0)
            _, online_state = net(*(v[:burn] for v in x), h0)
        q, online_state = net(*(v[burn : burn + L] for v in x), online_state)
        with torch.no_grad():  # the n bootstrap steps only pick the double-Q action: no gradient
            q_tail, _ = net(*(v[burn + L :] for v in x), online_state)
        q = torch.cat([q, q_tail])
        with torch.no_grad():
            best = q.argmax(-1, keepdim=True)
            bootstrap = q_target[burn:].gather(-1, best).squeeze(-1)
            reward, done = get["reward"][burn:], get["done"][burn:].float()
            returns, discount = torch.zeros(L, batch), torch.ones(L, batch)
            for k in range(n):
                returns += discount * reward[k : k + L]
                discount = discount * algo.discount * (1 - done[k : k + L])
            eps = algo.value_rescaling_eps
            y = h(returns + discount * h_inverse(bootstrap[n : n + L], eps), eps)
        q_sa = q[:L].gather(-1, get["action"][burn : burn + L, :, None]).squeeze(-1)
        loss = (0.5 * (q_sa - y) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), algo.clip_grad_norm)
        optimizer.step()
        plain_updates[0] += 1
        if plain_updates[0] % algo.target_update_period_updates == 0:
            target.load_state_dict(net.state_dict())

    plain_updates = [0]

    def iteration() -> None:
        nonlocal credit
        for _ in range(sampler.batch_T):
            act_and_step()
        if t * B >= algo.learning_starts_steps:
            credit += algo.replay_ratio * sampler.batch_T * B
            while credit >= per_update:
                credit -= per_update
                update()

    while plain_updates[0] == 0:
        iteration()
    before = plain_updates[0]
    seconds = timed_loop(iteration, lambda: t * B, steps)
    loop_updates = plain_updates[0] - before
    return _row(startup, steps, loop_updates, seconds, update_cpu_ms(update, updates))


# --- the comparison -------------------------------------------------------------------------------------

NAMES = {"ours": "this code base (job loop)", "plain": "plain PyTorch floor"}
QUANTITIES = (
    ("steps_per_cpu_second", "env steps per CPU second, learning on"),
    ("steps_per_second", "env steps per wall-clock second, learning on"),
    ("update_cpu_ms", "CPU ms per update"),
    ("startup_cpu_seconds", "CPU s from process start to the first env step"),
)


def summarize(rows: list[dict], args: argparse.Namespace, loads: tuple[float, float]) -> str:
    runs = {impl: speed.runs_of(rows, impl) for impl in IMPLS}
    columns = [q for q, _ in QUANTITIES]
    medians = {impl: speed.medians(runs[impl], columns) for impl in IMPLS}
    ratios = speed.paired_ratios(runs["ours"], runs["plain"], columns)
    lines = [
        f"# R2D1 on MinAtar {args.game}: this code base's job loop against a plain-PyTorch floor",
        "",
        f"Machine: {speed.cpu_model()}, {os.cpu_count()} logical CPUs, torch threads {args.threads}. Setting "
        f"{SETTING}; {args.steps} timed env steps after the first update, {args.updates} updates timed "
        f"alone, {args.repeats} repeats, ours and plain interleaved, each run in a fresh process. "
        f"1-minute load average {loads[0]:.2f} at the start, {loads[1]:.2f} at the end.",
        "",
        f"Command: `python -m bench.bench_r2d1_minatar {' '.join(args.argv)}`, "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(args.started))}-"
        f"{time.strftime('%H:%M UTC', time.gmtime())}, at commit {args.commit}.",
        "",
        "The ratio column is the median of the repeats' own ratios ours / plain with its 95% bootstrap CI.",
        "",
        "| quantity | ours (median) | plain (median) | ours / plain [95% CI] |",
        "|---|---:|---:|---:|",
    ]
    for k, (_, label) in enumerate(QUANTITIES):
        lines.append(
            f"| {label} | {medians['ours'][k]:.2f} | {medians['plain'][k]:.2f} "
            f"| {speed.ratio_with_ci(ratios[k])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file, one row per run")
    parser.add_argument("--game", default="breakout", choices=sorted(MINATAR_GAMES.values()))
    parser.add_argument("--steps", type=int, default=6400, help="timed env steps per run, learning on")
    parser.add_argument("--updates", type=int, default=20, help="updates timed alone per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both implementations")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 800 steps, 3 updates, one repeat")
    args = parser.parse_args()
    outputs.check_outputs(args.out)
    args.argv, args.started, args.commit = sys.argv[1:], time.time(), speed.git_commit()
    if args.quick:
        args.steps, args.updates, args.repeats = 800, 3, 1
    if min(args.steps, args.updates, args.repeats, args.threads) < 1:
        parser.error("--steps, --updates, --repeats and --threads must be >= 1")

    def run(impl: str, repeat: int) -> dict[str, Any]:
        call = f"{impl}_rate({args.game!r}, {args.steps}, {args.updates}, {repeat}, {args.threads})"
        result = speed.run_child("bench.bench_r2d1_minatar", call)
        return {"impl": impl, "game": args.game, "repeat": repeat, **result}

    rows, loads = speed.alternating_repeats(
        IMPLS,
        args.repeats,
        run,
        lambda row: (
            f"{row['steps_per_cpu_second']:8.1f} steps/CPU-s, update {row['update_cpu_ms']:6.1f} "
            f"CPU ms, startup {row['startup_cpu_seconds']:.2f} CPU s"
        ),
    )
    outputs.write_rows(args.out, rows, COLUMNS)
    outputs.write_summary(args.out, summarize(rows, args, loads))


if __name__ == "__main__":
    main()
