"""Sampler throughput: every sampling mode against the raw env and the ideal overlap.

Two sections, on Atari through ale-py's native vector env (``EnvConfig`` defaults, random no-op
starts), each figure the median of ``--repeats`` fresh runs (build and reset not timed, one warm-up
batch not timed):

1. ``trivial``: each sampler mode (serial, cpu, gpu, alternating; gpu / alternating also with the
   native env's threads as their env workers, ``*_threads``; the parallel ones also with their
   workers pinned over every CPU, a block of it each, ``*_pinned``) with a policy whose inference
   costs nothing (uniform random actions), against the raw ale-py vector env (``AtariVectorEnv``
   with the same preprocessing, ``send`` / ``recv`` and nothing else) stepping the same number of
   envs with random actions on the same number of env threads. The two are timed interleaved, a
   raw segment of T steps before each sampler batch, and the ratio is taken per repeat (median of
   the repeats' ratios), so that load drifts on a shared machine hit both alike. Target:
   every mode >= 0.9 of the raw rate. Row ``vec_env``: this project's Contract 1 wrapper of the same
   env (``NativeAtariVecEnv``: same-step autoreset, episode statistics, reward clipping) stepped
   the same way, the part of every mode's cost that is not the sampler's. Rows ``floor_*``: the
   raw env split over the worker processes of the parallel GPU mode (``--workers`` of them, and
   one: ``gpu_single``) and of the alternating mode, stepped with nothing but the hand-offs
   (``HandoffFloor``), timed beside the raw env the same way: what a process-worker layout costs on
   the machine before any sampler code runs, so each process-worker mode also gets its ratio to
   its floor (``of_floor``). Each row also has the CPU
   time per env step of the mode (this process and its workers, every thread) and of the raw env
   beside it, their ratio ``cpu_parity`` (raw / mode): the mode's rate relative to raw were the
   machine kept as busy as the raw env keeps it, and how many CPUs each keeps busy (``cpus_busy``,
   rate x CPU per step). Where the raw env's threads already use all the CPUs, the CPU a mode
   spends beyond the raw env's (its Python per step, its worker processes' hand-offs) bounds it
   near that ratio however well it overlaps; a mode that keeps fewer CPUs busy than the raw env
   waits on its own hand-offs instead.
2. ``nature_cnn``: the Nature DQN network (Mnih et al. 2015) acting epsilon-greedily on the CPU,
   serial vs parallel CPU vs alternating (process and thread workers, each also pinned to the CPUs
   but the first, which the main process's inference keeps to itself), against the ideal overlap
   of env stepping and inference, ``min(env rate, inference rate)`` (inference alone on the batch
   size the mode uses: B, or B/2 for the two alternating groups), both timed again right before
   each repeat of each mode, the ratio taken per repeat (median of the repeats' ratios). Target:
   alternating >= 0.8 of that ideal. Also reported: the CPU ceiling, ``CPUs / (env CPU +
   inference CPU per step)`` (the raw env's CPU time over all its threads, and the one-thread
   inference's), which is lower than the ideal overlap where the env threads and the inference
   cannot each have a core: there overlapping cannot reach min(env, inference), and
   ``ratio_to_cpu_ceiling`` compares the mode with the lower of the two.

3. ``runners``: DQN and R2D1 on the game (settings: ``runner_config``), synchronous vs
   asynchronous runner (serial sampler; async throttled to the replay ratio the sync runner gets
   from the algorithm's schedule, so both train at the same ratio), against each stage alone on
   the same cores: the sampler (the runs' serial sampler and agent) and the optimizer (env steps
   per second of ``optimize`` on a filled replay). The async runner pins its sampler process to
   the first half of the machine's CPUs and its optimizer to the other half (``stage_cpus``; one
   CPU each on 2 cores), and each stage alone is measured pinned to the same CPUs; the sync runner
   has every CPU. Run rates count the training phase only (from the first progress row with
   updates to the last). Target: async >= 0.9 of its bottleneck stage, and async > sync where
   sampling is not negligible against optimization.

Threads: torch uses one thread in every process; ``--env-threads`` is the total of native env
threads, split over the workers in parallel modes (each worker's vector env gets
``env_threads / n_workers``; with thread workers, each of the alternating sampler's two vector envs
gets half), so every mode has the same number of envs and env threads as the raw
reference.

Beside this file: ``bench.sampler_parts`` (the random policy, the raw env, the interleaved clocks),
``bench.sampler_floors`` (``HandoffFloor``) and ``bench.sampler_runners`` (the runners section's runs).

    python -m bench.bench_sampler --out runs/bench/sampler.csv [--quick] [--sections runners]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.run_config import SamplerConfig
from algorithms.samplers.modes import make_sampler
from bench import outputs, speed
from bench.sampler_floors import FLOORS, MODE_FLOORS, floor_vs_raw
from bench.sampler_parts import (
    AgentFactory,
    Paired,
    RawAleEnv,
    cpu_list,
    env_config,
    raw_batches,
    raw_env_rate,
    time_interleaved,
)
from bench.sampler_runners import RUNNER_ALGOS, optimizer_rate, runner_rate, runner_sampler_rate

# "<mode>_threads": the env-only modes with the native env's own threads as their workers
# (``SamplerConfig.env_workers="threads"``), one vector env per group in the main process.
# "..._pinned": the workers pinned, a block of ``pin_cpus`` each (``SamplerConfig.worker_cpus``).
# "..._single": one worker process, holding every env and env thread.
MODES = (
    "serial",
    "cpu",
    "gpu",
    "alternating",
    "gpu_single",
    "cpu_pinned",
    "gpu_pinned",
    "alternating_pinned",
    "gpu_threads",
    "alternating_threads",
    "gpu_threads_pinned",
    "alternating_threads_pinned",
)
CNN_MODES = (
    "serial",
    "cpu",
    "alternating",
    "alternating_pinned",
    "alternating_threads",
    "alternating_threads_pinned",
)


class ModeSetting(NamedTuple):
    mode: str  # SamplerConfig.mode
    env_workers: str
    n_workers: int
    n_envs: int  # how many vector envs the env threads are split over
    worker_cpus: str


def mode_setting(name: str, workers: int, pin_cpus: str) -> ModeSetting:
    """The sampler setting of a ``MODES`` entry in a bench run with ``workers`` worker processes;
    pinned entries get ``pin_cpus``."""
    mode, *variant = name.split("_")
    worker_cpus = pin_cpus if "pinned" in variant else ""
    n_workers = 1 if mode == "serial" or "single" in variant else workers
    if "threads" in variant:
        return ModeSetting(mode, "threads", n_workers, 2 if mode == "alternating" else 1, worker_cpus)
    return ModeSetting(mode, "processes", n_workers, n_workers, worker_cpus)


def pin_cpus(section: str) -> str:
    """The CPUs of the pinned modes' workers: every CPU for the trivial policy (the env work is all
    there is); for the Nature CNN every CPU but the first, which is left to the main process's
    inference (on one CPU, all of them)."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpu_list(frozenset(cpus if section == "trivial" or len(cpus) == 1 else cpus[1:]))


def vec_env_vs_raw(args: argparse.Namespace, seed: int) -> Paired:
    """``NativeAtariVecEnv`` and the raw ale-py env, random actions, timed interleaved in segments
    of T steps as the samplers are."""
    raw = RawAleEnv(args.game, args.envs, args.env_threads, seed + 1000)
    vec_env = make_vec_env(env_config(args.game, args.env_threads, 1), args.envs, seed)
    try:
        shape = (args.batches + 1, args.batch_t, args.envs)
        actions = np.random.default_rng(seed).integers(0, vec_env.action_space.n, size=shape)
        vec_env.reset()
        times, cpus = time_interleaved([raw_batches(raw), raw_batches(vec_env)], [[], []], actions)
    finally:
        vec_env.close()
        raw.close()
    steps = args.batches * args.batch_t * args.envs
    (raw_rate, vec_rate), (raw_cpu, vec_cpu) = steps / times, cpus / steps
    return Paired(vec_rate, raw_rate, vec_cpu, raw_cpu)


def inference_rate(game: str, batch: int, calls: int) -> float:
    """Env steps per second the Nature CNN agent can act for alone, on batches of ``batch`` envs."""
    agent = AgentFactory("nature_cnn", EnvConfig(game))()
    agent.set_mode("sample", 0)
    obs = torch.zeros((batch, *agent.observation_space.shape), dtype=torch.uint8)
    prev_action, prev_reward = torch.zeros(batch, dtype=torch.int64), torch.zeros(batch)
    for _ in range(3):
        agent.step(obs, prev_action, prev_reward, None)
    start = time.perf_counter()
    for _ in range(calls):
        agent.step(obs, prev_action, prev_reward, None)
    return calls * batch / (time.perf_counter() - start)


def sampler_rate(
    mode: str, policy: str, args: argparse.Namespace, seed: int, raw: RawAleEnv | None = None
) -> Paired:
    """One sampler over ``args.batches`` batches after one warm-up batch, and ``raw``.

    With ``raw`` (the raw env in ``raw_env_rate``'s setting) each batch is preceded by the
    same number of raw env steps, timed apart, so drifts of a shared machine's load hit both
    alike; without it the raw figures are NaN. The sampler's CPU time is this process's and its
    workers' during its batches (the raw env's, this process's during its segments).
    """
    section = "nature_cnn" if policy == "nature_cnn" else "trivial"
    setting = mode_setting(mode, args.workers, pin_cpus(section))
    env = env_config(args.game, args.env_threads, setting.n_envs)
    factory = AgentFactory(policy, env)
    agent = factory()
    config = SamplerConfig(
        mode=setting.mode,
        batch_T=args.batch_t,
        batch_B=args.envs,
        n_workers=setting.n_workers,
        env_workers=setting.env_workers,
        worker_cpus=setting.worker_cpus,
    )
    sampler = make_sampler(setting.mode, env, agent, config, seed, agent_factory=factory)
    shape = (args.batches + 1, args.batch_t, args.envs)
    actions = np.random.default_rng(seed).integers(0, agent.action_space.n, size=shape)
    batches = iter(range(args.batches + 1))
    try:
        sampler.initialize()
        agent.set_mode("sample", 0)
        runs, pids = [lambda _: sampler.sample(next(batches))], [sampler.worker_pids]
        if raw is not None:
            runs, pids = [raw_batches(raw), *runs], [[], *pids]
        times, cpus = time_interleaved(runs, pids, actions)
    finally:
        sampler.shutdown()
    steps = args.batches * config.batch_size
    if raw is None:
        return Paired(steps / times[0], float("nan"), cpus[0] / steps, float("nan"))
    return Paired(steps / times[1], steps / times[0], cpus[1] / steps, cpus[0] / steps)


def trivial_vs_raw(name: str, args: argparse.Namespace, seed: int) -> Paired:
    """A row of the trivial section (``vec_env``, a ``FLOORS`` layout or a ``MODES`` entry) and the
    raw env beside it."""
    if name == "vec_env":
        return vec_env_vs_raw(args, seed)
    if name in FLOORS:
        return floor_vs_raw(name, args, seed)
    return sampler_vs_raw(name, args, seed)


def sampler_vs_raw(mode: str, args: argparse.Namespace, seed: int) -> Paired:
    """The trivial policy's sampler and the raw env, measured interleaved batch by batch."""
    raw = RawAleEnv(args.game, args.envs, args.env_threads, seed + 1000)
    try:
        return sampler_rate(mode, "random", args, seed, raw=raw)
    finally:
        raw.close()


def median_of(fn, repeats: int) -> tuple[float, list[float]]:
    values = [fn(seed) for seed in range(repeats)]
    return statistics.median(values), values


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file, one row per measurement")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--envs", type=int, default=8, help="B: envs in every mode")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the parallel modes")
    parser.add_argument("--env-threads", type=int, default=2, help="native env threads in total")
    parser.add_argument("--batch-t", type=int, default=32)
    parser.add_argument("--batches", type=int, default=16, help="timed batches per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4 timed batches of 16 steps per repeat")
    parser.add_argument(
        "--sections", default="trivial,nature_cnn,runners", help="comma-separated subset of the sections"
    )
    parser.add_argument("--runner-steps", type=int, default=2000, help="env steps per DQN run")
    parser.add_argument("--runner-algos", default="dqn,r2d1", help="algorithms of the runners section")
    parser.add_argument("--r2d1-steps", type=int, default=16_000, help="env steps per R2D1 run")
    args = parser.parse_args()
    outputs.check_outputs(args.out)
    sections = set(args.sections.split(","))
    if not sections <= {"trivial", "nature_cnn", "runners"}:
        parser.error(f"--sections: unknown {sorted(sections - {'trivial', 'nature_cnn', 'runners'})}")
    if not set(args.runner_algos.split(",")) <= set(RUNNER_ALGOS):
        parser.error(f"--runner-algos: {args.runner_algos!r} is not a subset of {RUNNER_ALGOS}")
    if args.quick:
        args.batches, args.batch_t, args.runner_steps, args.r2d1_steps = 4, 16, 800, 6_400
    return args


def record(
    rows: list[dict[str, Any]], section: str, what: str, median: float, values: list[float], **extra: Any
) -> None:
    """A row of the CSV and the summary (``extra``: its further columns), and its progress line."""
    rows.append(
        {
            "section": section,
            "what": what,
            "steps_per_s": round(median, 1),
            "values": " ".join(f"{v:.1f}" for v in values),
            **extra,
        }
    )
    print(f"{section:>10} {what:>26}: {median:9.1f} env steps/s  ({rows[-1]['values']})", flush=True)


def trivial_section(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The raw env, then each of ``vec_env``, the ``FLOORS`` and the ``MODES`` with the raw env beside it."""
    steps = args.batches * args.batch_t
    # The nature_cnn section times the raw env itself, before each of its repeats.
    runs = [raw_env_rate(args.game, args.envs, args.env_threads, steps, s) for s in range(args.repeats)]
    raw, env_cpu = (statistics.median(run[i] for run in runs) for i in (0, 1))
    record(
        rows, "trivial", "raw_env", raw, [rate for rate, _ in runs], cpu_us_per_step=round(env_cpu * 1e6, 2)
    )
    floors: dict[str, float] = {}
    for mode in ("vec_env", *FLOORS, *MODES):
        pairs = [trivial_vs_raw(mode, args, seed) for seed in range(args.repeats)]
        ratios = [p.rate / p.raw_rate for p in pairs]
        ratio = statistics.median(ratios)
        if mode in FLOORS:
            floors[mode] = ratio
        floor = floors.get(MODE_FLOORS.get(mode, ""))
        record(
            rows,
            "trivial",
            mode,
            statistics.median(p.rate for p in pairs),
            [p.rate for p in pairs],
            reference=round(statistics.median(p.raw_rate for p in pairs), 1),
            ratio=round(ratio, 3),
            ratios=" ".join(f"{r:.3f}" for r in ratios),
            target="" if mode == "vec_env" or mode in FLOORS else 0.9,
            **({} if floor is None else {"floor": round(floor, 3), "of_floor": round(ratio / floor, 3)}),
            cpu_us_per_step=round(statistics.median(p.cpu for p in pairs) * 1e6, 2),
            reference_cpu_us_per_step=round(statistics.median(p.raw_cpu for p in pairs) * 1e6, 2),
            cpu_parity=round(statistics.median(p.raw_cpu / p.cpu for p in pairs), 3),
            cpus_busy=round(statistics.median(p.rate * p.cpu for p in pairs), 2),
            reference_cpus_busy=round(statistics.median(p.raw_rate * p.raw_cpu for p in pairs), 2),
        )


def nature_cnn_repeat(mode: str, args: argparse.Namespace, seed: int) -> tuple[float, float, float, float]:
    """(rate, ideal overlap, no overlap, CPU ceiling) of one repeat of ``mode`` with the Nature CNN.

    The env and the inference alone are timed right before the mode, and its ratios are taken against
    those: the inference rate alone swings +-15% between runs here, which a reference measured once
    at the start passed straight into every ratio.
    """
    steps = args.batches * args.batch_t
    batch = args.envs // 2 if mode.startswith("alternating") else args.envs
    env_rate, env_cpu = raw_env_rate(args.game, args.envs, args.env_threads, steps, seed)
    inference = inference_rate(args.game, batch, steps)
    rate = sampler_rate(mode, "nature_cnn", args, seed).rate
    ideal = min(env_rate, inference)
    # Without any overlap each step costs env time plus inference time.
    no_overlap = 1.0 / (1.0 / env_rate + 1.0 / inference)
    # What the CPUs allow when env threads and inference (one torch thread: its wall time is its
    # CPU time) run at once: on few cores this, not the ideal, is the ceiling.
    cpu_ceiling = len(os.sched_getaffinity(0)) / (env_cpu + 1.0 / inference)
    return rate, ideal, no_overlap, cpu_ceiling


def nature_cnn_section(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Inference alone on both batch sizes, then each of the ``CNN_MODES`` against the ideal overlap."""
    steps = args.batches * args.batch_t
    half = args.envs // 2
    inf_full, v_full = median_of(lambda s: inference_rate(args.game, args.envs, steps), args.repeats)
    record(rows, "nature_cnn", f"inference_B{args.envs}", inf_full, v_full)
    inf_half, v_half = median_of(lambda s: inference_rate(args.game, half, steps), args.repeats)
    record(rows, "nature_cnn", f"inference_B{half}", inf_half, v_half)
    for mode in CNN_MODES:
        repeats = [nature_cnn_repeat(mode, args, seed) for seed in range(args.repeats)]
        rate, ideal, no_overlap, cpu_ceiling = (statistics.median(r[i] for r in repeats) for i in range(4))
        record(
            rows,
            "nature_cnn",
            mode,
            rate,
            [r[0] for r in repeats],
            ideal=round(ideal, 1),
            ratio=round(statistics.median(r[0] / r[1] for r in repeats), 3),
            ratios=" ".join(f"{r[0] / r[1]:.3f}" for r in repeats),
            target=0.8 if mode.startswith("alternating") else "",
            no_overlap=round(no_overlap, 1),
            cpu_ceiling=round(cpu_ceiling, 1),
            ratio_to_cpu_ceiling=round(statistics.median(r[0] / min(r[1], r[3]) for r in repeats), 3),
        )


def runners_section(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Each stage alone, then the sync and async runners against the slower stage."""
    for algo in args.runner_algos.split(","):
        sampler_alone, values = median_of(lambda s, a=algo: runner_sampler_rate(a, args, s), args.repeats)
        record(rows, "runners", f"{algo}_sampler_alone", sampler_alone, values)
        opt, values = median_of(lambda s, a=algo: optimizer_rate(a, args, s), args.repeats)
        record(rows, "runners", f"{algo}_optimizer_alone", opt, values)
        bottleneck = min(sampler_alone, opt)
        # Sync alternates the stages on the same core: its ceiling is 1 / (1/sampler + 1/optimizer).
        serial = 1.0 / (1.0 / sampler_alone + 1.0 / opt)
        for kind in ("sync", "async"):
            results = [runner_rate(algo, kind, args, seed) for seed in range(args.repeats)]
            rate = statistics.median(r[0] for r in results)
            record(
                rows,
                "runners",
                f"{algo}_{kind}",
                rate,
                [r[0] for r in results],
                ideal=round(bottleneck, 1),
                ratio=round(rate / bottleneck, 3),
                target=0.9 if kind == "async" else "",
                no_overlap=round(serial, 1),
                replay_ratio=round(statistics.median(r[1] for r in results), 3),
            )


def summary(args: argparse.Namespace, rows: list[dict[str, Any]], machine: str) -> str:
    """The Markdown summary: one table row per CSV row."""
    lines = [
        f"# Sampler throughput: {args.game}, B={args.envs} envs, {args.workers} workers, "
        f"{args.env_threads} env threads, T={args.batch_t}, {args.batches} batches, median of {args.repeats}",
        "",
        f"Machine: {machine} (possibly shared with other jobs: treat the figures as indicative).",
        "",
        "Reference: the raw ale-py env rate (trivial policy) or the ideal overlap min(env, inference)",
        "(Nature CNN); no overlap: 1 / (1/env + 1/inference), a step's cost when env and inference take",
        "turns; CPU ceiling: CPUs / (env CPU + inference CPU per step), what the cores allow when both",
        "run at once (below the ideal overlap where they cannot both have a core of their own). CPU",
        "us/step (trivial policy): the mode's CPU time per env step, every thread of this process and",
        "its workers, and the raw env's beside it; CPU parity: raw / mode, the mode's ratio were the",
        "machine as busy as the raw env keeps it; CPUs busy: rate x CPU per step, the mode's (raw's).",
        "floor_*: the raw env in the worker processes of a process-worker mode, with nothing but the",
        "hand-offs (HandoffFloor); floor: that layout's ratio to raw, of floor: the mode's ratio over it.",
        "",
        "| section | what | env steps/s | reference | ratio | target | floor | of floor | no overlap "
        "| CPU us/step | raw CPU us/step | CPU parity | CPUs busy | CPU ceiling | ratio to it "
        "| replay ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def busy(row: dict[str, Any]) -> str:
        return f"{row['cpus_busy']} ({row['reference_cpus_busy']})" if "cpus_busy" in row else ""

    for row in rows:
        reference = row.get("ideal", row.get("reference", ""))
        lines.append(
            f"| {row['section']} | {row['what']} | {row['steps_per_s']:.0f} | {reference} | "
            f"{row.get('ratio', '')} | {row.get('target', '')} | {row.get('floor', '')} | "
            f"{row.get('of_floor', '')} | {row.get('no_overlap', '')} | "
            f"{row.get('cpu_us_per_step', '')} | {row.get('reference_cpu_us_per_step', '')} | "
            f"{row.get('cpu_parity', '')} | {busy(row)} | {row.get('cpu_ceiling', '')} | "
            f"{row.get('ratio_to_cpu_ceiling', '')} | {row.get('replay_ratio', '')} |"
        )
    return "\n".join(lines) + "\n"


SECTIONS = {"trivial": trivial_section, "nature_cnn": nature_cnn_section, "runners": runners_section}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    sections = set(args.sections.split(","))
    for name, section in SECTIONS.items():
        if name in sections:
            section(args, rows)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "quick")}
    machine = f"{speed.cpu_model()}, {os.cpu_count()} logical CPUs"
    for row in rows:
        row.update(settings, machine=machine)
    outputs.write_rows(args.out, rows, list(dict.fromkeys(k for row in rows for k in row)))
    print()
    outputs.write_summary(args.out, summary(args, rows, machine))


if __name__ == "__main__":
    main()
