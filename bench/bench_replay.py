"""Replay speed and memory: prioritized sample + priority update against cpprb; frame replay bytes per step.

1. Prioritized replay throughput. Both replays hold ``--capacity`` (1M) transitions
   of a 4-dim float32 observation (obs, action, reward, next obs, done, as cpprb's example), filled
   before timing; one cycle is ``sample(batch)`` (data, indices, IS weights) followed by a priority
   update of the sampled items with fresh random priorities. Ours is
   ``ReplayBuffer(TransitionStorage(FullObservations, n_step=1), PrioritizedSelector)``; cpprb's is
   ``PrioritizedReplayBuffer`` (C++), both at alpha 0.6, beta 0.4. The figure is cycles per second,
   ``--cycles`` per repeat, median of ``--repeats``.
2. Frame replay memory: bytes per step of ``TransitionStorage(FrameObservations(4))`` at
   ``--frame-capacity`` (1M) steps of 84x84 frames, from the allocated arrays (frames, per-step
   fields, n-step fields), against 84 x 84 = 7056 bytes. It allocates (and zero-fills) about
   7 GB at 1M: the bench checks available memory first.

    python -m bench.bench_replay --out runs/bench/replay.csv [--capacity 1000000] [--cycles 3000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.arrays import NamedArrays
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FrameObservations, FullObservations
from algorithms.replay.selectors import PrioritizedSelector
from algorithms.replay.transitions import TransitionStorage
from bench.outputs import check_outputs, write_rows, write_summary

OBS_DIM = 4
ALPHA, BETA = 0.6, 0.4
FILL_CHUNK = 50_000
FRAME_BYTES = 84 * 84


def ours(capacity: int, seed: int) -> tuple[object, object]:
    """A filled prioritized replay of ours and its (sample, update) cycle."""
    rng = np.random.default_rng(seed)
    example = NamedArrays(
        observation=np.zeros(OBS_DIM, np.float32),
        action=np.zeros((), np.int64),
        reward=np.zeros((), np.float32),
    )
    storage = TransitionStorage(capacity + 2 * FILL_CHUNK, 1, example, FullObservations(), n_step=1)
    replay = ReplayBuffer(storage, PrioritizedSelector(storage.num_items, alpha=ALPHA, beta=BETA, seed=seed))
    written = 0
    while written < capacity + FILL_CHUNK:  # past capacity: the ring has wrapped, all slots hold data
        obs = rng.random((FILL_CHUNK, 1, OBS_DIM), dtype=np.float32)
        replay.append(
            NamedArrays(
                observation=obs,
                action=rng.integers(0, 4, (FILL_CHUNK, 1)),
                reward=rng.random((FILL_CHUNK, 1), dtype=np.float32),
                terminated=rng.random((FILL_CHUNK, 1)) < 0.01,
                truncated=np.zeros((FILL_CHUNK, 1), bool),
                final_observation=obs,
            )
        )
        written += FILL_CHUNK

    def cycle(batch_size: int) -> None:
        _, indices, _ = replay.sample(batch_size)
        replay.update_priorities(indices, rng.random(batch_size) + 1e-3)

    return replay, cycle


def cpprb_replay(capacity: int, seed: int) -> tuple[object, object]:
    """cpprb's PrioritizedReplayBuffer, filled the same way, and its cycle."""
    import cpprb

    rng = np.random.default_rng(seed)
    env_dict = {"obs": {"shape": OBS_DIM}, "act": {}, "rew": {}, "next_obs": {"shape": OBS_DIM}, "done": {}}
    replay = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=ALPHA)
    for _ in range(0, capacity + FILL_CHUNK, FILL_CHUNK):
        replay.add(
            obs=rng.random((FILL_CHUNK, OBS_DIM)),
            act=rng.integers(0, 4, FILL_CHUNK),
            rew=rng.random(FILL_CHUNK),
            next_obs=rng.random((FILL_CHUNK, OBS_DIM)),
            done=rng.random(FILL_CHUNK) < 0.01,
        )

    def cycle(batch_size: int) -> None:
        sample = replay.sample(batch_size, beta=BETA)
        replay.update_priorities(sample["indexes"], rng.random(batch_size) + 1e-3)

    return replay, cycle


def time_cycles(cycle, cycles: int, batch_size: int) -> float:
    for _ in range(50):  # warm-up
        cycle(batch_size)
    start = time.perf_counter()
    for _ in range(cycles):
        cycle(batch_size)
    return cycles / (time.perf_counter() - start)


def frame_bytes_per_step(capacity: int) -> tuple[float, int]:
    """Bytes per step of an allocated frame replay of ``capacity`` steps, and its total bytes."""
    example = NamedArrays(
        observation=np.zeros((4, 84, 84), np.uint8),
        action=np.zeros((), np.int64),
        reward=np.zeros((), np.float32),
    )
    needed = capacity * FRAME_BYTES * 1.1
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if available < 1.5 * needed:
        raise SystemExit(
            f"bench_replay: a {capacity}-step frame replay needs about {needed / 2**30:.1f} GiB and only "
            f"{available / 2**30:.1f} GiB are free; pass a smaller --frame-capacity"
        )
    storage = TransitionStorage(capacity, 1, example, FrameObservations(4), n_step=3)
    total = storage.nbytes
    del storage
    return total / capacity, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="CSV file, one row per measurement")
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cycles", type=int, default=3000, help="sample + update cycles per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frame-capacity", type=int, default=1_000_000)
    args = parser.parse_args()
    check_outputs(args.out)
    torch.set_num_threads(1)

    rows = []
    builders = {"ours": ours, "cpprb": cpprb_replay}
    replays = {name: build(args.capacity, seed=0) for name, build in builders.items()}
    for repeat in range(args.repeats):  # interleaved, so drifting machine load hits both alike
        for name, (_, cycle) in replays.items():
            rate = time_cycles(cycle, args.cycles, args.batch_size)
            rows.append(
                {
                    "measure": "prioritized_sample_update_per_s",
                    "impl": name,
                    "capacity": args.capacity,
                    "batch_size": args.batch_size,
                    "repeat": repeat,
                    "value": round(rate, 1),
                }
            )
    speed_rows = list(rows)
    medians = {
        name: statistics.median(r["value"] for r in speed_rows if r["impl"] == name) for name in builders
    }
    per_step, total = frame_bytes_per_step(args.frame_capacity)
    rows.append(
        {
            "measure": "frame_replay_bytes_per_step",
            "impl": "ours",
            "capacity": args.frame_capacity,
            "batch_size": "",
            "repeat": 0,
            "value": round(per_step, 2),
        }
    )

    write_rows(args.out, rows, list(rows[0]))
    ratio = medians["ours"] / medians["cpprb"]
    summary = "\n".join(
        [
            "# Replay benchmark",
            "",
            f"Machine: {os.cpu_count()} CPUs, load average at the end {os.getloadavg()[0]:.2f};"
            " torch threads 1.",
            "",
            f"Prioritized replay, capacity {args.capacity}, batch {args.batch_size}, sample + priority update"
            f" cycles per second (median of {args.repeats} x {args.cycles} cycles):",
            "",
            "| impl | median cycles/s | repeats |",
            "|---|---|---|",
            *(
                f"| {name} | {medians[name]:.0f} | "
                + ", ".join(f"{r['value']:.0f}" for r in speed_rows if r["impl"] == name)
                + " |"
                for name in builders
            ),
            "",
            f"ours / cpprb = {ratio:.2f} (target >= 0.5)",
            "",
            f"Frame replay at {args.frame_capacity} steps: {per_step:.1f} bytes/step ="
            f" {per_step / FRAME_BYTES:.4f} x 84*84 (target <= 1.05); {total / 2**30:.2f} GiB in all.",
            "",
        ]
    )
    write_summary(args.out, summary)


if __name__ == "__main__":
    main()
