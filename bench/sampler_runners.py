"""The runners section's measurements for ``bench.bench_sampler``: the DQN and R2D1 runs it compares
(``runner_config``), each stage alone on the CPUs the async runner pins it to (``stage_cpus``), and
the rate of a whole run while it trains."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from algorithms.cpus import pinned
from algorithms.run_config import SamplerConfig
from bench.sampler_parts import cpu_list, env_config

RUNNER_ALGOS = ("dqn", "r2d1")


def stage_cpus() -> tuple[frozenset[int], frozenset[int]]:
    """(sampler CPUs, optimizer CPUs) of the async runs: the first and the second half of the CPUs
    this process may use (both all of it on a 1-CPU machine)."""
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    return frozenset(cpus[:half]), frozenset(cpus[half:] or cpus)


def runner_config(algo: str, game: str, n_steps: int, kind: str) -> Any:
    """A ``TrainConfig`` for the runner comparison, mostly training: warm-up of a quarter of the steps.

    Cores split between the stages (async: pinned, ``stage_cpus``): one env thread and one torch
    thread for the sampler, one torch thread for the optimizer. ``dqn``: Nature DQN, 32 samples
    trained per 4 env steps (replay ratio 8): optimization dominates. ``r2d1``: R2D1 at R2D2's
    replay ratio 0.8 (Table 2) on 8 envs, with 4 sequences of 80 (+40 burn-in) per minibatch
    instead of 64, so that one update (320 trained steps, one per 400 env steps) costs about as
    much as sampling those steps: the regime where overlapping the two pays. The async runner is
    throttled to the ratio the sync runner gets from the algorithm's own schedule, so both train at
    the same replay ratio.
    """
    from algorithms.algos import dqn, r2d1
    from algorithms.run_config import RunnerConfig, TrainConfig

    if algo == "dqn":
        algo_config = dqn.Config(
            learning_starts_steps=n_steps // 4, replay_size_steps=n_steps, eps_decay_steps=n_steps
        )
        sampler = SamplerConfig(batch_T=4, batch_B=8, eval_episodes=0)
        ratio = algo_config.batch_size / algo_config.env_steps_per_update
    else:
        algo_config = r2d1.Config(
            batch_size_sequences=4,
            learning_starts_steps=n_steps // 4,
            replay_size_steps=n_steps,
            eps_decay_steps=0,
            # rlpyt's 512-unit layer before the LSTM (atari_r2d1_model.py), as the runner comparison
            # in docs/results was measured with; R2D2's network (fc_size 0) is r2d1.Config's default.
            fc_size=512,
        )
        sampler = SamplerConfig(batch_T=algo_config.sequence_period_steps, batch_B=8, eval_episodes=0)
        ratio = algo_config.replay_ratio
    sampler_cpus, optimizer_cpus = (cpu_list(cpus) for cpus in stage_cpus()) if kind == "async" else ("", "")
    return TrainConfig(
        algo=algo,
        algo_config=algo_config,
        env=env_config(game, 1, 1),
        sampler=sampler,
        runner=RunnerConfig(
            kind=kind,
            async_sampler_cpus=sampler_cpus,
            async_optimizer_cpus=optimizer_cpus,
            n_steps=n_steps,
            log_interval_steps=max(n_steps // 16, sampler.batch_T * sampler.batch_B),
            checkpoint_interval_steps=n_steps,
            replay_ratio_target=ratio if kind == "async" else 0.0,
        ),
    )


def runner_steps(algo: str, args: argparse.Namespace) -> int:
    return args.runner_steps if algo == "dqn" else args.r2d1_steps


def runner_sampler_rate(algo: str, args: argparse.Namespace, seed: int) -> float:
    """Env steps per second of the runs' sampler alone (serial, the algorithm's agent, sample mode),
    on the async runs' sampler CPUs."""
    from algorithms.runners.sync import SyncRunner

    runner = SyncRunner.build(runner_config(algo, args.game, runner_steps(algo, args), "sync"), None, None)
    sampler = runner.sampler
    with pinned(stage_cpus()[0], "sampler alone"):
        sampler.initialize()  # its env threads start here, on the pinned CPUs
        try:
            runner.agent.set_mode("sample", 0)
            sampler.sample(0)
            n_batches = max(2, runner_steps(algo, args) // (4 * sampler.batch_spec.size))
            start = time.perf_counter()
            for itr in range(n_batches):
                sampler.sample(itr)
            return n_batches * sampler.batch_spec.size / (time.perf_counter() - start)
        finally:
            sampler.shutdown()


def optimizer_rate(algo: str, args: argparse.Namespace, seed: int) -> float:
    """Env steps per second the optimizer alone sustains: ``optimize`` on one recorded batch, again and
    again (append it, train at the algorithm's replay ratio), on a filled replay, on the async runs'
    optimizer CPUs."""
    from algorithms.runners.sync import SyncRunner

    runner = SyncRunner.build(runner_config(algo, args.game, runner_steps(algo, args), "sync"), None, None)
    algo_ = runner.algo
    runner.sampler.initialize()
    try:
        runner.agent.set_mode("sample", 0)
        samples, _ = runner.sampler.sample(0)
        runner.agent.set_mode("train")
        with pinned(stage_cpus()[1], "optimizer alone"):
            while algo_.optimize(0, samples).updates == 0:  # fill the replay up to learning (not timed)
                pass
            calls, updates = 0, 0
            start = time.perf_counter()
            while updates < 16:
                updates += algo_.optimize(0, samples).updates
                calls += 1
            seconds = time.perf_counter() - start
    finally:
        runner.sampler.shutdown()
    return calls * runner.sampler.batch_spec.size / seconds


def runner_rate(algo: str, kind: str, args: argparse.Namespace, seed: int) -> tuple[float, float]:
    """(env steps per second while training, achieved replay ratio) of a run with runner ``kind``.

    The rate is taken from the run's progress rows, from the first row with updates to the last, so
    process start-up and the warm-up before learning (no updates in either runner) are not counted.
    """
    import tempfile

    from algorithms.rundir import read_table
    from algorithms.train import train

    config = runner_config(algo, args.game, runner_steps(algo, args), kind)
    config = dataclasses.replace(config, runner=dataclasses.replace(config.runner, seed=seed))
    with tempfile.TemporaryDirectory() as tmp:
        counters = train(config, Path(tmp) / "run")
        progress, _ = read_table(Path(tmp) / "run" / "progress.csv")
    training = progress[progress["updates"] > 0]
    if len(training) < 3:
        raise RuntimeError(f"runner_rate({algo}, {kind}): only {len(training)} progress rows with updates")
    first, last = training.iloc[0], training.iloc[-1]
    rate = (last["env_steps"] - first["env_steps"]) / (last["wall_time_s"] - first["wall_time_s"])
    return float(rate), counters.replay_ratio_trained
