"""``python -m repro run-job`` and ``pack-job``: what the scheduler starts, one job or one pack of
seeds in one process, each run resolved from the plan's setting as ``repro.plans`` resolves it."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from algorithms.configs import ConfigError


def _job_configs(args: argparse.Namespace, seeds: Sequence[int]) -> list:
    """The ``TrainConfig`` of the job of each seed, as the plan resolves it (with its ``--set`` values,
    the slot's device and the scheduler's threads); ``--tensorboard`` adds event files to the run
    without changing its arm, ``--track`` turns on the tracker (``algorithms.logger``)."""
    import dataclasses

    from algorithms.logger import TRACKER_ENV
    from protocol.plan_args import parse_deviation
    from repro.plans import resolve_job_setting
    from repro.profiles import load_profile
    from repro.settings import parse_overrides, train_config

    profile = load_profile(args.profile)
    point = {key: values[0] for key, values in parse_overrides(args.set or []).items()}
    if args.track:
        os.environ[TRACKER_ENV] = "wandb"
    configs = [
        train_config(
            *resolve_job_setting(
                args.arm,
                profile,
                args.env,
                seed,
                args.device,
                threads=args.threads,
                point=point,
                deviation=parse_deviation(args.deviation) if args.deviation else None,
            )
        )
        for seed in seeds
    ]
    if args.tensorboard:
        configs = [
            dataclasses.replace(c, runner=dataclasses.replace(c.runner, tensorboard=True)) for c in configs
        ]
    return configs


def _as_job(body: Callable[[], None], run_dirs: Sequence[str]) -> int:
    """Run ``body`` as a job of the scheduler: stop with it, and as on Ctrl-C at SIGTERM or SIGHUP also
    when started by hand (so status.json says interrupted); exit with ``BUSY_EXIT_CODE`` when a run
    directory is held by another process, ``NO_SPACE_EXIT_CODE`` on a full disk, 130 when interrupted."""
    import errno

    from algorithms.rundir import RunBusy
    from repro.job_side import BUSY_EXIT_CODE, NO_SPACE_EXIT_CODE, follow_scheduler, stop_on_signals

    try:
        stop_on_signals()
        follow_scheduler()
        body()
    except RunBusy as e:
        print(f"error: {e}; this job did not start and wrote nothing", file=sys.stderr)
        return BUSY_EXIT_CODE
    except KeyboardInterrupt:
        print(f"interrupted: stopped; {_said(run_dirs)}", file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        print(f"error: no space left on device writing {e.filename or 'the run'}", file=sys.stderr)
        return NO_SPACE_EXIT_CODE
    return 0


def _said(run_dirs: Sequence[str]) -> str:
    """What the runs' files say after a stop: status.json says interrupted where the run had opened,
    nothing where the stop came first (no status.json to point at)."""
    from algorithms.rundir import read_status

    def interrupted(run_dir: str) -> bool:
        try:
            return (read_status(Path(run_dir))[0] or {}).get("state") == "interrupted"
        except ValueError:  # may not be read: it says nothing we can point at
            return False

    if any(map(interrupted, run_dirs)):
        return "status.json says interrupted (rerun to continue)"
    return "stopped before the run started; nothing of it was written (rerun to start it)"


def cmd_run_job(args: argparse.Namespace) -> int:
    from algorithms.train import train

    def body() -> None:
        (config,) = _job_configs(args, [args.seed])
        train(config, Path(args.run_dir), resume=True)

    return _as_job(body, [args.run_dir])


def cmd_pack_job(args: argparse.Namespace) -> int:
    """Train the jobs of ``--seeds`` (one arm and env) in one process (``train_packed``), each into its
    ``--run-dir``. Members already complete are left alone; one left trains as a single run. When the
    members to continue are at different checkpoints (``PackMismatch``: a crash between two members'
    checkpoint writes), each continues alone with ``train``, one after another."""
    from algorithms.packed.pack import train_packed
    from algorithms.packed.runner import PackMismatch
    from algorithms.rundir import is_complete
    from algorithms.train import train
    from protocol.plan_args import parse_seeds

    seeds = parse_seeds(args.seeds)
    if len(seeds) != len(args.run_dir):
        raise ConfigError(f"{len(seeds)} seeds but {len(args.run_dir)} --run-dir")

    def body() -> None:
        members = list(zip(_job_configs(args, seeds), map(Path, args.run_dir)))
        # As the scheduler judges them (a torn or short last row is not complete: ``completion``).
        left = [(c, d) for c, d in members if not is_complete(d, c.runner.n_steps)]
        if len(left) > 1:
            try:
                train_packed([c for c, _ in left], [d for _, d in left], resume=True)
                return
            except PackMismatch as e:
                print(f"pack-job: {e} (now, one after another, as single runs)", file=sys.stderr, flush=True)
        for config, run_dir in left:
            if not is_complete(run_dir, config.runner.n_steps):
                train(config, run_dir, resume=True)

    return _as_job(body, args.run_dir)
