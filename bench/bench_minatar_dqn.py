"""DQN on MinAtar: this code base against MinAtar's own reference DQN, same machine, same run.

This code base runs the setting ``dqn_minatar`` (Young & Tian 2019's DQN, loaded by name through
``repro.plans.resolve_job_setting`` with the ``paper`` profile, which changes nothing, and the
game set per run) through its synchronous runner (``SyncRunner.iteration``, the training loop of
``python -m repro``, with no run directory: no progress rows, checkpoints or evaluation). The
reference is MinAtar's ``examples/dqn.py`` (kenjyoung/MinAtar, GPL-3.0), run unmodified from a
scratch copy that is not part of this repository::

    mkdir -p /tmp/minatar_ref
    git --git-dir=<clone of github.com/kenjyoung/MinAtar>/.git show HEAD:examples/dqn.py \\
        > /tmp/minatar_ref/dqn.py

The script has no option to cap its run (``NUM_FRAMES`` is a constant, 5 million) and logs only
every 1,000 episodes, so it is driven by a harness process instead of its command line: a fresh
Python process (``reference_rate``) imports the file as it is, and calls its own ``dqn(env, ...)``
function (what its ``main`` calls for ``-g <game>``, with replay and target network on and its
default step size), handing it ``minatar.Environment(game)`` (the object its ``main`` builds, at the
package's defaults: sticky actions 0.1, difficulty ramping) whose ``act`` also counts calls, reads
the clocks and, after the timed frames, raises an exception that ends the run. Counting adds one
Python call per frame (well under 1 us) to the reference.

What is timed, for both, is ``--steps`` env steps (frames: MinAtar has no frame skip) right after
the replay start, every step one env step, one epsilon-greedy action and one update of a batch of
32 (each side's own replay start: ``REPLAY_START_SIZE`` frames for the reference, which trains
from frame ``REPLAY_START_SIZE + 1``; the setting's ``learning_starts_steps`` for this code base, timed
from its first update on); with ``--after N``, the same number of steps N updates later, where a
long run spends its time: the optimizers' running averages of units that stopped getting gradients
decay into denormal numbers only after thousands of updates, and both sides' steps then slow down
unless denormals are flushed (``algorithms.learners.common.run_step_hooks``). Both run on the CPU
with ``--threads`` torch threads (1). Exploration:
the reference anneals epsilon over the ``FIRST_N_FRAMES`` after its replay start, this code base
from step 0 (the setting's ``eps_decay_steps`` keep the reference's end point), so the reference
enters the timed window at epsilon 1.0 and this code base a few hundredths lower (0.957 with the
setting of this writing); both fall by under 0.01 per 1,000 steps. This code base thus acts
greedily, one forward pass on one observation (~0.16 ms on the 2-core dev machine, against ~6 ms
per step), on about 4% more of the timed steps: under 0.2% of its time, and against it.

Two more rows bound what any implementation could reach here (``plain_rate``): the same update
written as plain PyTorch (Young & Tian's network, centered RMSprop, Huber loss, batches of 32 from
observations of random play), with no env step, no action and no bookkeeping, eagerly
(``plain``) and with a ``torch.compile``d optimizer step (``plain_compiled``); their rates are
updates per second. ``plain / reference`` is the most that removing every cost outside the update's
kernels could give, ``ours / plain`` this code base's share of that floor.

The implementations are timed interleaved, the order alternating from repeat to repeat, so drifts
of a shared machine's load hit all alike; the CPU-second figures are the steadier ones on a shared
machine, where wall-clock time also counts the time other jobs hold the cores. Reported: every
repeat in the CSV (steps per wall-clock second and per CPU second of the process, all its threads),
the medians, and for each pair in ``RATIOS`` the median of the repeats' ratios with its 95%
bootstrap CI, in a Markdown summary next to the CSV. Without the scratch copy (``--reference``
absent) the reference is left out.

    python -m bench.bench_minatar_dqn --out runs/bench/minatar_dqn.csv [--game breakout]
        [--steps 1000] [--after 0] [--repeats 5] [--reference /tmp/minatar_ref/dqn.py]
        [--impls ours,reference,plain,plain_compiled] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from algorithms.envs.minatar import MINATAR_GAMES
from algorithms.process import retain_freed_memory
from algorithms.run_config import TrainConfig
from algorithms.runners.sync import SyncRunner
from bench import outputs, speed
from repro.plans import resolve_job_setting
from repro.profiles import load_profile
from repro.settings import train_config

SETTING = "dqn_minatar"
DEFAULT_REFERENCE = Path("/tmp/minatar_ref/dqn.py")
COLUMNS = (*speed.GAME_RUN_COLUMNS, "seconds", "cpu_seconds", *speed.RATES)


def setting_config(game: str, seed: int, setting: str = SETTING) -> TrainConfig:
    """The setting's ``TrainConfig`` for MinAtar game ``game`` (``breakout``) and run seed ``seed``."""
    resolved, classes = resolve_job_setting(setting, load_profile("paper"), env=f"minatar_{game}", seed=seed)
    return train_config(resolved, classes)


def time_ours(config: TrainConfig, steps: int, after: int = 0) -> dict[str, float]:
    """``steps`` env steps of the synchronous runner's loop from its first update on, or from update
    ``after`` (build, the replay start and the updates before not timed), keeping freed memory as a
    job does (``retain_freed_memory``)."""
    retain_freed_memory()
    runner = SyncRunner.build(config, None, None)
    counters, algo = runner.counters, runner.algo

    def iteration() -> None:
        runner.iteration(counters.sampler_itrs)
        runner.cross_boundaries()

    runner.sampler.initialize()
    try:
        while algo.updates < max(1, after):
            iteration()
        steps0, updates0 = counters.env_steps, algo.updates
        start = speed.clocks()
        while counters.env_steps < steps0 + steps:
            iteration()
        seconds, cpu_seconds = speed.clocks() - start
    finally:
        runner.sampler.shutdown()
    env_steps, updates = counters.env_steps - steps0, algo.updates - updates0
    if updates < env_steps // config.algo_config.env_steps_per_update:
        raise RuntimeError(f"ours: {updates} updates in {env_steps} timed env steps")
    return {"env_steps": env_steps, "updates": updates, "seconds": seconds, "cpu_seconds": cpu_seconds}


class StopReference(Exception):
    """Raised from the reference's env once the timed frames are done: ends its ``dqn`` loop."""


def reference_rate(
    dqn_py: str, game: str, steps: int, seed: int, threads: int, after: int = 0
) -> dict[str, float]:
    """In a fresh process: ``steps`` frames of the unmodified reference script's ``dqn`` from its
    first training frame, or from ``after`` frames later (see the module docstring)."""
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    spec = importlib.util.spec_from_file_location("minatar_reference_dqn", dqn_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # The env.act call of frame t is call t + 1; the script trains from frame REPLAY_START_SIZE + 1.
    first_call = module.REPLAY_START_SIZE + 2 + after
    marks: dict[str, np.ndarray] = {}

    class TimedEnvironment(module.Environment):
        calls = 0

        def act(self, a):
            self.calls += 1
            if self.calls == first_call:
                marks["start"] = speed.clocks()
            elif self.calls == first_call + steps:
                marks["stop"] = speed.clocks()
                raise StopReference
            return super().act(a)

    env = TimedEnvironment(game)
    env.seed(seed)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            module.dqn(env, False, False, os.path.join(tmp, game))
        except StopReference:
            pass
    if "stop" not in marks:
        raise RuntimeError(f"reference: {dqn_py} ended before frame {first_call + steps - 1}")
    seconds, cpu_seconds = marks["stop"] - marks["start"]
    return {"env_steps": steps, "updates": steps, "seconds": seconds, "cpu_seconds": cpu_seconds}


class PackedQNetwork(torch.nn.Module):
    """``members`` copies of Young & Tian's network side by side: a grouped convolution and batched
    matrix products over stacked weights, observations [members, batch, C, 10, 10] -> Q-values
    [members, batch, actions]. Member k's outputs depend only on member k's weights and inputs."""

    def __init__(self, members: int, channels: int, actions: int) -> None:
        super().__init__()
        self.members, self.channels = members, channels
        self.conv = torch.nn.Conv2d(members * channels, members * 16, 3, groups=members)
        scale_hidden, scale_out = (16 * 8 * 8) ** -0.5, 128**-0.5  # nn.Linear's default init bounds
        self.w_hidden = torch.nn.Parameter(
            torch.empty(members, 16 * 8 * 8, 128).uniform_(-1, 1) * scale_hidden
        )
        self.b_hidden = torch.nn.Parameter(torch.empty(members, 1, 128).uniform_(-1, 1) * scale_hidden)
        self.w_out = torch.nn.Parameter(torch.empty(members, 128, actions).uniform_(-1, 1) * scale_out)
        self.b_out = torch.nn.Parameter(torch.empty(members, 1, actions).uniform_(-1, 1) * scale_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, b = x.shape[:2]
        h = self.conv(x.transpose(0, 1).reshape(b, k * self.channels, 10, 10)).relu()
        h = h.reshape(b, k, 16 * 8 * 8).transpose(0, 1)
        h = torch.baddbmm(self.b_hidden, h, self.w_hidden).relu()
        return torch.baddbmm(self.b_out, h, self.w_out)


def plain_rate(
    game: str, steps: int, seed: int, threads: int, compiled: bool, members: int = 1
) -> dict[str, float]:
    """In a fresh process: ``steps`` updates of the same DQN update written as plain PyTorch, the floor.

    Young & Tian's network (a 16-filter 3x3 convolution, 128 units, one output per action), centered
    RMSprop with their constants, the Huber loss against ``r + 0.99 max_a Q_target(s', a)``, batches of
    32 drawn from 5,000 observations of random play: the kernels every implementation of this update
    must run, with no env step, no action and no bookkeeping. ``compiled`` runs the optimizer step
    through ``torch.compile`` (its first call, the compilation, not timed). ``members`` > 1 packs that
    many independent networks into one (``PackedQNetwork``), each with its own batch and a loss that
    is the sum of the members' losses (so each member's gradient is its own): one packed update is
    ``members`` member updates, and the rate counts member updates."""
    from torch import nn
    from torch.nn import functional

    from algorithms.envs.minatar import MinAtarEnv

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    env = MinAtarEnv(game)
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    for _ in range(4_999):
        obs, _, terminated, _, _ = env.step(int(env.action_space.sample()))
        frames.append(env.reset()[0] if terminated else obs)
    replay = torch.as_tensor(np.stack(frames))
    channels, actions = replay.shape[1], int(env.action_space.n)

    def network() -> nn.Module:
        if members > 1:
            return PackedQNetwork(members, channels, actions)
        return nn.Sequential(
            nn.Conv2d(channels, 16, 3),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * 8 * 8, 128),
            nn.ReLU(),
            nn.Linear(128, actions),
        )

    q, q_target = network(), network().requires_grad_(False)
    optimizer = torch.optim.RMSprop(q.parameters(), lr=2.5e-4, alpha=0.95, eps=0.01, centered=True)
    optimizer_step = torch.compile(optimizer.step) if compiled else optimizer.step
    shape = (members, 32) if members > 1 else (32,)

    def update() -> None:
        index = torch.randint(len(replay) - 1, shape)
        action, reward = torch.randint(actions, shape), torch.rand(shape)
        q_sa = q(replay[index].float()).gather(-1, action[..., None]).squeeze(-1)
        with torch.no_grad():
            target = reward + 0.99 * q_target(replay[index + 1].float()).max(-1).values
        loss = functional.smooth_l1_loss(q_sa, target, reduction="none").mean(-1).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer_step()

    for _ in range(100):  # compilation and warm-up, not timed
        update()
    seconds, cpu_seconds = steps * speed.per_call_seconds(update, steps)
    return {
        "env_steps": steps * members,
        "updates": steps * members,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def run_child(call: str) -> dict[str, float]:
    """``call`` (an expression over this module's functions) in a child Python process."""
    return speed.run_child("bench.bench_minatar_dqn", call)


def time_reference(
    dqn_py: Path, game: str, steps: int, seed: int, threads: int, after: int = 0
) -> dict[str, float]:
    """``reference_rate`` in a child Python process."""
    return run_child(f"reference_rate({str(dqn_py)!r}, {game!r}, {steps}, {seed}, {threads}, {after})")


IMPLS = ("ours", "reference", "plain", "plain_compiled", "plain_packed")
PACKED_MEMBERS = 5  # a five-seed study in one process (docs/results/packed.md)
NAMES = {
    "ours": "this code base",
    "reference": "MinAtar examples/dqn.py",
    "plain": "plain PyTorch update, no env (the floor)",
    "plain_compiled": "plain update, compiled optimizer step",
    "plain_packed": f"plain update, {PACKED_MEMBERS} members packed (member updates)",
}
# (numerator, denominator) of the ratios the summary reports, where both were timed.
RATIOS = (
    ("ours", "reference"),
    ("plain", "reference"),
    ("plain_compiled", "reference"),
    ("ours", "plain"),
    ("plain_packed", "plain"),
)


def summarize(
    rows: list[dict], args: argparse.Namespace, config: TrainConfig, loads: tuple[float, float]
) -> str:
    """The Markdown summary: medians per implementation and the ratios between those timed."""
    impls = [impl for impl in IMPLS if any(r["impl"] == impl for r in rows)]
    runs = {impl: speed.runs_of(rows, impl) for impl in impls}
    medians = {impl: speed.medians(runs[impl]) for impl in impls}
    algo = config.algo_config
    lines = [
        f"# DQN on MinAtar {args.game}: training throughput (env steps/s)",
        "",
        f"Machine: {speed.cpu_model()}, {os.cpu_count()} logical CPUs, torch threads {args.threads}. "
        f"Setting {args.setting}: batch {algo.batch_size}, one update per {algo.env_steps_per_update} "
        f"env step(s), replay {algo.replay_size_steps}; {args.steps} timed steps after each side's "
        f"replay start and {args.after} updates more, median of {args.repeats}. The plain rows are "
        f"updates per second (no env step or action). 1-minute load average {loads[0]:.2f} at the "
        f"start, {loads[1]:.2f} at the end.",
        "",
        "| quantity | per wall-clock second | per CPU second |",
        "|---|---:|---:|",
    ]
    for impl in impls:
        lines.append(f"| {NAMES[impl]} (median) | {medians[impl][0]:.1f} | {medians[impl][1]:.1f} |")
    for top, bottom in RATIOS:
        if top not in runs or bottom not in runs:
            continue
        paired = speed.paired_ratios(runs[top], runs[bottom])
        lines.append(
            f"| {top} / {bottom}: median of the repeats' ratios [95% bootstrap CI] "
            f"| {speed.ratio_with_ci(paired[0])} | {speed.ratio_with_ci(paired[1])} |"
        )
    if "reference" not in runs and "reference" in args.impls.split(","):
        lines += ["", f"Reference not timed: no scratch copy at {args.reference} (see the module docstring)."]
    return "\n".join(lines) + "\n"


def time_impl(impl: str, args: argparse.Namespace, repeat: int) -> dict[str, float]:
    """One repeat of ``impl``, seeded by the repeat; each but ``ours`` in its own child process."""
    if impl == "ours":
        return time_ours(setting_config(args.game, repeat, args.setting), args.steps, args.after)
    if impl == "reference":
        return time_reference(args.reference, args.game, args.steps, repeat, args.threads, args.after)
    compiled, members = impl == "plain_compiled", PACKED_MEMBERS if impl == "plain_packed" else 1
    updates = max(1, args.steps // members)  # packed: about --steps member updates in all
    return run_child(f"plain_rate({args.game!r}, {updates}, {repeat}, {args.threads}, {compiled}, {members})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="CSV file, one row per implementation and repeat"
    )
    parser.add_argument("--game", default="breakout", choices=sorted(MINATAR_GAMES.values()))
    parser.add_argument("--steps", type=int, default=1000, help="timed env steps per run")
    parser.add_argument(
        "--after",
        type=int,
        default=0,
        help="updates each side makes before the timed steps (0: from its first; a long run's "
        "optimizer state holds denormal numbers only after thousands)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both implementations")
    parser.add_argument("--setting", default=SETTING, help="this code base's setting (name or .toml path)")
    parser.add_argument(
        "--reference", type=Path, default=DEFAULT_REFERENCE, help="scratch copy of MinAtar's examples/dqn.py"
    )
    parser.add_argument(
        "--impls", default=",".join(IMPLS), help=f"comma-separated, from {', '.join(IMPLS)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 steps, one repeat")
    args = parser.parse_args()
    outputs.check_outputs(args.out)
    if args.quick:
        args.steps, args.repeats = 200, 1
    if min(args.steps, args.repeats, args.threads) < 1:
        parser.error("--steps, --repeats and --threads must be >= 1")
    if args.after < 0:
        parser.error(f"--after must be >= 0, got {args.after}")
    impls = [impl for impl in args.impls.split(",") if impl]
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown or not impls:
        parser.error(f"--impls: unknown {unknown or 'empty list'}; choose from {', '.join(IMPLS)}")
    torch.set_num_threads(args.threads)
    config = setting_config(args.game, 0, args.setting)
    if "reference" in impls and not args.reference.is_file():
        print(f"no reference at {args.reference}: not timing it", flush=True)
        impls.remove("reference")

    def run(impl: str, repeat: int) -> dict[str, Any]:
        row = {"impl": impl, "game": args.game, "repeat": repeat, **time_impl(impl, args, repeat)}
        row["steps_per_second"] = round(row["env_steps"] / row["seconds"], 2)
        row["steps_per_cpu_second"] = round(row["env_steps"] / row["cpu_seconds"], 2)
        row["seconds"], row["cpu_seconds"] = round(row["seconds"], 4), round(row["cpu_seconds"], 4)
        return row

    rows, loads = speed.alternating_repeats(
        impls,
        args.repeats,
        run,
        lambda row: f"{row['steps_per_second']:7.1f} steps/s, {row['steps_per_cpu_second']:7.1f} steps/CPU-s",
    )
    outputs.write_rows(args.out, rows, COLUMNS)
    print()
    outputs.write_summary(args.out, summarize(rows, args, config, loads))


if __name__ == "__main__":
    main()
