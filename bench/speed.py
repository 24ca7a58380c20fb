"""The harness of the training-speed benchmarks against a peer library (Stable-Baselines3):
``bench_dqn_speed`` and ``bench_pg_speed`` time this code base and SB3 on the very same env
objects; ``bench_minatar_dqn`` takes the clocks and the statistics.

What every comparison here shares: the (wall-clock, CPU) clocks, this code base's serial training
loop, this code base's vector env behind SB3's ``VecEnv`` interface, the SB3 callbacks that start
the clock after the untimed part of ``learn``, the repeats (ours, then the peer, in every repeat,
so that load drifts of a shared machine hit both alike), the medians of the repeats and the median
of the repeats' own ratios with its 95% bootstrap CI (``bench.learning.paired_ratio``), and the
per-call costs the machine limits are built from; the CSV + Markdown output is ``bench.outputs``'s.
Every rate and cost is a pair (per wall-clock second, per CPU second of this process, all its
threads: ``time.process_time``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from algorithms.arrays import BatchSpec
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.process import retain_freed_memory
from algorithms.run_config import SamplerConfig
from algorithms.samplers.base import env_spaces
from algorithms.samplers.serial import SerialSampler
from bench import outputs
from bench.learning import paired_ratio

# The CSV columns of a repeat's two rates.
RATES = ("steps_per_second", "steps_per_cpu_second")
# The first CSV columns of the MinAtar benches (DQN's, R2D1's): which run a row is and the work it did.
GAME_RUN_COLUMNS = ("impl", "game", "repeat", "env_steps", "updates")


def clocks() -> np.ndarray:
    """(wall-clock, CPU) time now in seconds; CPU time of this process, all its threads."""
    return np.array([time.perf_counter(), time.process_time()])


def speed_parser(description: str) -> argparse.ArgumentParser:
    """The options every comparison with the peer takes: ``--out``, ``--repeats``, ``--threads``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads for both (default: all cores)"
    )
    return parser


def parse_args(parser: argparse.ArgumentParser, positive: Sequence[str]) -> argparse.Namespace:
    """``parser``'s arguments, the options named in ``positive`` (their ``dest``, in the order the
    error lists them) checked >= 1; sets torch's thread count to ``--threads``."""
    args = parser.parse_args()
    outputs.check_outputs(args.out)
    if min(getattr(args, name) for name in positive) < 1:
        options = [f"--{name.replace('_', '-')}" for name in positive]
        parser.error(f"{', '.join(options[:-1])} and {options[-1]} must be >= 1")
    torch.set_num_threads(args.threads)
    return args


# --- this code base ---------------------------------------------------------------------------------


def build_serial(
    algo: ModuleType, config: Any, env_config: EnvConfig, batch_T: int, batch_B: int, seed: int
) -> tuple[Any, SerialSampler, Any]:
    """(agent, initialised serial sampler, algo) of algorithm module ``algo`` (``algorithms.algos.dqn``)
    with ``config`` on ``batch_B`` envs of ``env_config``, ``batch_T`` steps per batch; torch seeded
    with ``seed`` before the model is built."""
    torch.manual_seed(seed)
    agent = algo.build_agent(config, *env_spaces(env_config))
    sampler = SerialSampler(env_config, agent, SamplerConfig(batch_T=batch_T, batch_B=batch_B), seed)
    sampler.initialize()
    return agent, sampler, algo.Algo(config, agent, env_config.env_frameskip, BatchSpec(batch_T, batch_B))


def train_rate(
    agent: Any, sampler: SerialSampler, algo: Any, untimed_itrs: int, timed_itrs: int
) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of ``timed_itrs`` iterations of sample + optimize after
    ``untimed_itrs`` untimed ones (allocations, first-call overheads, filling a replay); shuts the
    sampler down. The process keeps freed memory as a training job's does (``retain_freed_memory``)."""
    retain_freed_memory()
    steps_per_itr = sampler.batch_spec.size
    start = clocks()
    for itr in range(untimed_itrs + timed_itrs):
        if itr == untimed_itrs:
            start = clocks()
        agent.set_mode("sample", itr * steps_per_itr)
        samples, _ = sampler.sample(itr)
        agent.set_mode("train")
        algo.optimize(itr * steps_per_itr, samples)
    elapsed = clocks() - start
    sampler.shutdown()
    return timed_itrs * steps_per_itr / elapsed


def run_child(module: str, call: str) -> dict[str, Any]:
    """``call`` (an expression over the functions of bench module ``module``) in a child Python
    process (its own torch, fresh module state, its own startup); the dict it returns."""
    code = f"import json; from {module} import *; print(json.dumps({call}))"
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    if out.returncode != 0:
        raise RuntimeError(f"{call} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_call_seconds(call: Callable[[], object], n: int) -> np.ndarray:
    """(wall-clock, CPU) seconds per call of ``call``, over ``n`` calls."""
    start = clocks()
    for _ in range(n):
        call()
    return (clocks() - start) / n


def env_step_seconds(env_config: EnvConfig, actions: np.ndarray, seed: int) -> np.ndarray:
    """(wall-clock, CPU) seconds per vectorised step of ``actions.shape[1]`` envs of ``env_config``,
    stepped with each row of ``actions`` [N, B, ...] after a reset."""
    env = make_vec_env(env_config, actions.shape[1], seed)
    env.reset()
    start = clocks()
    for a in actions:
        env.step(a)
    seconds = (clocks() - start) / len(actions)
    env.close()
    return seconds


# --- the peer (Stable-Baselines3) ---------------------------------------------------------------------


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


def sb3_learn_rate(
    model_class: type,
    policy: str,
    env_config: EnvConfig,
    num_envs: int,
    seed: int,
    clock: Any,
    total_timesteps: int,
    timed_steps: int,
    **hyperparameters: Any,
) -> np.ndarray:
    """Env steps per (wall-clock, CPU) second of SB3's ``model_class(policy, ...).learn`` over the
    ``timed_steps`` after ``clock`` started (a ``step_clock`` or a ``rollout_clock``), on ``num_envs``
    envs of ``env_config`` (``sb3_vec_env``), seeded with ``seed``, on the CPU."""
    env = sb3_vec_env(env_config, num_envs, seed)
    model = model_class(policy, env, seed=seed, device="cpu", verbose=0, **hyperparameters)
    model.learn(total_timesteps=total_timesteps, callback=clock)
    elapsed = clocks() - clock.start
    env.close()
    return timed_steps / elapsed


# --- repeats, statistics, output ----------------------------------------------------------------------


def interleaved_repeats(
    timers: Mapping[str, Callable[[int], np.ndarray]], repeats: int, labels: Mapping[str, str]
) -> list[dict[str, Any]]:
    """One row per repeat and implementation: every timer of ``timers`` (implementation -> rates of
    a run seeded by the repeat) in turn, in each of ``repeats`` repeats; ``labels`` lead every row
    and progress line."""
    rows = []
    for repeat in range(repeats):
        for impl, timer in timers.items():
            wall, cpu = timer(repeat)
            rows.append({**labels, "impl": impl, "repeat": repeat, RATES[0]: wall, RATES[1]: cpu})
            name = " ".join([*labels.values(), impl])
            print(f"{name} repeat {repeat}: {wall:.1f} steps/s, {cpu:.1f} steps/CPU-s", flush=True)
    return rows


def alternating_repeats(
    impls: Sequence[str],
    repeats: int,
    run: Callable[[str, int], dict[str, Any]],
    describe: Callable[[dict[str, Any]], str],
) -> tuple[list[dict[str, Any]], tuple[float, float]]:
    """Each of ``impls`` once per repeat, the order reversed every other repeat so that drifts of a
    shared machine's load hit all alike: ``run(impl, repeat)`` gives a row, printed as
    ``describe(row)``. Returns the rows by implementation then repeat, and the 1-minute load average
    at the start and the end."""
    start_load, rows = os.getloadavg()[0], []
    for repeat in range(repeats):
        for impl in impls if repeat % 2 == 0 else impls[::-1]:
            row = run(impl, repeat)
            rows.append(row)
            print(f"{impl:>14} repeat {repeat}: {describe(row)}", flush=True)
    rows.sort(key=lambda r: (list(impls).index(r["impl"]), r["repeat"]))
    return rows, (start_load, os.getloadavg()[0])


def runs_of(rows: Sequence[Mapping[str, Any]], impl: str) -> list[Mapping[str, Any]]:
    """The rows of implementation ``impl``, in repeat order."""
    return [r for r in rows if r["impl"] == impl]


def medians(runs: Sequence[Mapping[str, Any]], columns: Sequence[str] = RATES) -> np.ndarray:
    """The median over ``runs`` of each of ``columns`` (the ``RATES`` by default)."""
    return np.array([statistics.median(r[c] for r in runs) for c in columns])


def paired_ratios(
    top: Sequence[Mapping[str, Any]], bottom: Sequence[Mapping[str, Any]], columns: Sequence[str] = RATES
) -> np.ndarray:
    """[column, (median, CI low, CI high)]: the median of the repeats' ratios ``top / bottom``
    (runs of the same repeat ran back to back) with its 95% bootstrap CI over the repeats, for each
    of ``columns`` (the ``RATES`` by default)."""
    return np.array([paired_ratio([r[c] for r in top], [r[c] for r in bottom]) for c in columns])


def ratio_with_ci(paired: np.ndarray) -> str:
    """A ``paired_ratios`` row as ``median [low, high]``."""
    median, low, high = paired
    return f"{median:.2f} [{low:.2f}, {high:.2f}]"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo where there is one (Linux), else the platform's guess."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The short commit of this checkout, with ``+`` when tracked files differ from it."""
    root = Path(__file__).resolve().parent.parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root)
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root).returncode != 0
    return commit.stdout.strip() + ("+" if dirty else "")
