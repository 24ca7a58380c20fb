"""``python -m repro``: published settings, plans and the scheduler from the command line.

    python -m repro list
    python -m repro show r2d2_paper [--profile smoke]
    python -m repro diff rlpyt_r2d1_published r2d1_corrected      # NAME@PROFILE also works
    python -m repro run ppo_cartpole_zoo --seeds 100-104 --profile smoke   # a setting, no plan file
    python -m repro run ppo_cartpole_zoo --env CartPole-v1 --seeds 1,5,9 --set algo.learning_rate=1e-4,3e-4
                                  # a sweep: one arm per value, compared in one report
    python -m repro run r2d1 --seeds 3 --profile smoke --dry-run   # plan, totals, estimated time
    python -m repro run r2d1 --seeds 3 --profile smoke [--games pong,qbert] [--backend ray] [--jobs 2]
                                  # estimated duration first (repro/probe.py), plan record, then the jobs
    python -m repro run r2d1_minatar --seeds 5 --pack 5   # the 5 seeds of each arm and game in one process
    python -m repro summary runs/r2d1-smoke

Bad input (unknown setting, game, profile or plan, a bad seed spec, an unknown ``--set`` key or a
value of the wrong type, a sweep over a budget key, ``--env`` with a plan, a missing optional
dependency, a malformed config file, a value a job could not run with) prints one line ``error: ...``
and exits 2 before any run directory is created; ``python -m repro`` alone prints the usage and
exits 2. ``run`` exits 1 when a job failed for good or its run was busy (written by another
process), and 130 when interrupted (Ctrl-C, SIGTERM or SIGHUP; rerun the same command to continue).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from algorithms.configs import ConfigError

DEFAULT_ROOT = Path("runs")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _cmd_list(args: argparse.Namespace) -> int:
    from repro.plans import available_plans
    from repro.profiles import available_profiles
    from repro.settings import available_settings

    print("settings:", " ".join(available_settings()))
    print("profiles:", " ".join(available_profiles()))
    print("plans:   ", " ".join(available_plans()))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from repro.inspect_settings import resolve_label, show_text
    from repro.plans import is_plan, load_plan, plan_lines
    from repro.settings import available_settings

    # A name that is both (r2d1_minatar) is the setting; its plan shows by path.
    setting_name = not args.setting.endswith(".toml") and args.setting in available_settings()
    if "@" not in args.setting and not setting_name and is_plan(args.setting):
        print("\n".join(plan_lines(load_plan(args.setting))))
        return 0
    label = args.setting + (f"@{args.profile}" if args.profile else "")
    print(show_text(resolve_label(label, sets=args.set or ())))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from repro.inspect_settings import diff_text, resolve_label

    print(diff_text(resolve_label(args.a), resolve_label(args.b, sets=args.set or ())))
    return 0


def _plan_jobs(args: argparse.Namespace):
    """``(plan, seeds, jobs)`` of ``run``: a plan (a name or a ``.toml`` file with ``[plan]``), or a
    setting (a name or a ``.toml`` file with ``[setting]``) run on ``--env`` (default its own env)."""
    from algorithms.configs import unknown_key_message
    from repro.plans import available_plans, expand, is_plan, load_plan, parse_list, parse_seeds, setting_plan
    from repro.settings import available_settings, parse_overrides

    overrides = parse_overrides(args.set or [])
    env_option = parse_list(args.env, "--env")
    arms = games = None
    if is_plan(args.plan):
        if env_option:
            raise ConfigError(
                f"--env {','.join(env_option)}: --env names the envs of a setting; plan '{args.plan}' "
                "takes --games"
            )
        plan = load_plan(args.plan)
        games = parse_list(args.games, "--games")
        arms = parse_list(args.arms, "--arms", paths=True)
    elif args.plan.endswith(".toml") or args.plan in available_settings():
        if args.arms:
            raise ConfigError(
                f"--arms {args.arms}: --arms replaces a plan's arms, and '{args.plan}' is a setting "
                "(compare values of one setting with --set key=a,b)"
            )
        plan = setting_plan(args.plan, env_option or parse_list(args.games, "--games"))
    else:
        known = available_plans() + available_settings()
        raise ConfigError(
            f"'{args.plan}' is neither a plan nor a setting; " + unknown_key_message(args.plan, known)
        )
    spec = args.seeds if args.seeds is not None else plan.seeds
    pilot = args.pilot or plan.pilot
    if pilot:
        spec = _power_plan(pilot, games or plan.envs, args.detect, args.seeds, spec)
    if spec is None:
        raise ConfigError("--seeds is required: a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)")
    seeds = parse_seeds(spec)
    jobs = expand(
        plan, seeds, args.profile, Path(args.root), experiment=args.exp or None, envs=games, arms=arms,
        overrides=overrides,
    )  # fmt: skip
    return plan, seeds, jobs


def _power_plan(pilot: str, envs, detect: float, given: str | None, spec: str | None) -> str:
    """Print the seeds per arm and game needed to detect an IQM difference of ``detect`` points with
    80% power, from the pilot table (``repro.power``), and return the seed spec to run: ``given``
    (``--seeds``) with the power it has, else that many seeds (at least ``MIN_SEEDS``) from the first
    seed of the plan's ``spec`` (0 without one)."""
    from repro.plans import format_seeds, parse_seeds
    from repro.power import plan_seeds

    if not detect > 0:
        raise ConfigError(f"--detect {detect}: the IQM difference to detect must be positive (points)")
    found = plan_seeds(pilot, envs, delta=detect / 100)
    spread = ", ".join(f"{arm} {se * 100:.3g}" for arm, se in found.arm_se.items())
    print(
        f"power plan: pilot {found.source} ({found.pilot_seeds} seeds x {len(found.games)} games: "
        f"{', '.join(found.games)}); SE of each arm's IQM (points): {spread}"
    )
    print(
        f"  to detect an IQM difference of {detect:g} points with {found.power:.0%} power (two-sided, "
        f"alpha 0.05; the spread's 80% upper limit, x{found.upper:.2f}) each arm needs {found.seeds} seeds "
        "per game (at least 5)"
    )
    if given is not None:
        n = len(parse_seeds(given))
        print(
            f"  --seeds {given}: {n} seeds per game have {found.power_with(n):.0%} power at {detect:g} "
            f"points; the smallest difference detected with {found.power:.0%} power is "
            f"{found.detectable_with(n) * 100:.3g} points"
        )
        return given
    # A count starts at seed 0; a range or list (fresh seeds, 100-104) at its first seed.
    first = 0 if spec is None or str(spec).strip().isdigit() else parse_seeds(spec)[0]
    chosen = format_seeds(list(range(first, first + found.seeds)))
    print(f"  seeds: {chosen} (give --seeds to choose others)")
    return chosen


def _positive_int_arg(text: str | None, name: str) -> int | None:
    """``JOBS`` or ``CPUS_PER_JOB``: empty (the default: ``None``) or a positive integer."""
    if text is None or not str(text).strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
    return value


def _profile_arg(path: Path) -> str:
    """A shipped profile by its name, so that job command lines (recorded in each run's
    metadata.json) carry no path of this checkout; any other profile file by its absolute path."""
    from repro.profiles import is_shipped

    return path.stem if is_shipped(path) else str(Path(path).resolve())


def _tasks(jobs, cpus_per_job: int | None = None, packs=None, views: Sequence[str] = ()):
    """The scheduler's tasks: one per job (``run-job``), or one per pack of ``packs`` (``pack_jobs``;
    a pack of one is a job, of more a ``pack-job``)."""
    from repro.plans import format_deviation, format_seeds
    from repro.scheduler import Member, Task

    tasks = []
    for pack in packs or [(j,) for j in jobs]:
        j = pack[0]
        argv = [sys.executable, "-m", "repro", "run-job" if len(pack) == 1 else "pack-job"]
        argv += ["--arm", j.setting, "--profile", _profile_arg(j.profile_path), "--env", j.env]
        argv += (
            ["--seed", str(j.seed)] if len(pack) == 1 else ["--seeds", format_seeds([m.seed for m in pack])]
        )
        for member in pack:
            argv += ["--run-dir", str(member.run_dir)]
        for key, text in j.overrides:
            argv += ["--set", f"{key}={text}"]
        if j.deviation is not None:
            argv += ["--deviation", format_deviation(j.deviation)]
        argv += list(views)
        if cpus_per_job is not None:  # the job's torch threads follow its CPUs
            argv += ["--threads", str(cpus_per_job)]
        threads = cpus_per_job or j.config.runner.torch_threads
        if len(pack) == 1:
            tasks.append(Task(j.key, j.run_dir, tuple(argv), j.n_steps, threads))
        else:
            members = [Member(m.key, m.run_dir, m.n_steps) for m in pack]
            tasks.append(Task.packed(_pack_key(pack), members, argv, threads))
    return tasks


def _pack_key(pack) -> str:
    return f"{pack[0].arm}/{pack[0].env}/seeds{','.join(str(j.seed) for j in pack)}"


def _packs(text: str | None, jobs, n_slots: int, backend: str):
    """``(packs, K)`` for ``--pack`` (``PACK``): empty or 1, every job alone; K, the jobs of one
    arm and env K at a time (``repro.plans.pack_jobs``), each pack checked with
    ``algorithms.packed.check_packable`` (a ``ConfigError`` naming the arm when it cannot pack);
    ``auto``, K = min(seeds of an arm and env, ceil(jobs / slots)): 1 when every job gets a slot,
    else packs just large enough to start every (arm, env)'s jobs at once, up to all its seeds;
    an arm that cannot pack then runs unpacked, said in one line."""
    from repro.plans import pack_jobs

    text = (text or "").strip()
    auto = text == "auto"
    if auto:
        if backend == "ray":
            raise ConfigError("PACK=auto sizes packs to this machine's slots; with BACKEND=ray give PACK=<K>")
        seeds = max(len(group) for group in pack_jobs(jobs, len(jobs)))
        k = min(seeds, math.ceil(len(jobs) / n_slots))
        why = "every job gets a slot" if k == 1 else f"up to {k} seeds of an arm and env per process"
        print(f"--pack auto: K={k} ({len(jobs)} jobs, {n_slots} slot(s): {why})")
    else:
        try:
            k = _positive_int_arg(text, "PACK") or 1
        except ConfigError:
            raise ConfigError(f"PACK must be a positive integer or 'auto', got {text!r}") from None
    packs = pack_jobs(jobs, k)
    if k == 1:
        return packs, 1
    from algorithms.packed import check_packable

    out, unpacked = [], set()
    for pack in packs:
        arm = pack[0].arm
        if len(pack) > 1 and arm not in unpacked:
            try:
                check_packable([j.config for j in pack])
            except ValueError as e:
                why = str(e).splitlines()[0].removeprefix("packing: ")
                if not auto:
                    raise ConfigError(f"--pack {k}: arm '{arm}' cannot be packed: {why}") from None
                print(f"--pack auto: {arm} runs unpacked ({why})")
                unpacked.add(arm)
        out.extend([(j,) for j in pack] if arm in unpacked else [pack])
    return out, k


def _gpus_arg(text: str | None) -> float | None:
    """``GPUS_PER_JOB``: 0, a fraction of one GPU (0.25 puts four jobs on a GPU) or whole GPUs."""
    if text is None or not str(text).strip():
        return None
    try:
        gpus = float(text)
    except ValueError:
        gpus = math.nan
    if not (math.isfinite(gpus) and gpus >= 0 and (gpus <= 1 or gpus.is_integer())):
        raise ConfigError(f"GPUS_PER_JOB must be 0, a fraction up to 1 or a whole number, got {text!r}")
    return gpus


def _connect_ray(args, jobs, tasks) -> int | None:
    """Check the run directories can be written, connect to the Ray cluster and check it can take the
    jobs, before anything is written; an exit code when not (130: Ctrl-C while connecting; bad input
    is a ``ConfigError``)."""
    from repro import ray_backend

    ray_backend.check_storage([j.run_dir for j in jobs])
    try:
        ray_backend.connect(args.address)
        gpus = _gpus_arg(args.gpus_per_job)
        if gpus is None:
            gpus = ray_backend.gpus_per_job_default()
        ray_backend.check_fits(max(t.threads for t in tasks), gpus)
    except KeyboardInterrupt:
        print(ray_backend.INTERRUPTED_CONNECTING, file=sys.stderr)
        return 130
    return None


def _dry_run(plan, jobs, n_slots: int, slot_kind: str, packs, k: int) -> None:
    from repro.tables import human_count, render

    print(f"plan {plan.name}: {plan.title}")
    print(f"experiment directory: {jobs[0].run_dir.parents[2]}")
    rows = [(j.key, human_count(j.n_steps), human_count(j.frames), j.config.runner.device) for j in jobs]
    print(render(["job", "env steps", "frames", "device"], rows, align_right=(1, 2)))
    steps = sum(j.n_steps for j in jobs)
    frames = sum(j.frames for j in jobs)
    print(
        f"\n{len(jobs)} jobs, {steps:,} env steps, {frames:,} frames in total; {n_slots} {slot_kind} slot(s)"
    )
    if k > 1:
        rows = [(p[0].arm, p[0].env, ",".join(str(j.seed) for j in p), len(p)) for p in packs]
        print(f"\npacks (--pack {k}): {len(packs)} process(es) for {len(jobs)} jobs")
        print(render(["arm", "env", "seeds", "K"], rows, align_right=(3,)))


# An estimate from a day on prints the hint at smaller runs.
LONG_ESTIMATE_S = 86_400.0


def smaller_runs_hint(plan: str, profile: str) -> str:
    """One line naming smaller runs than ``plan`` at ``profile``: the Makefile's variables, then the CLI's."""
    options = []
    if profile not in ("mini", "minatar_cpu", "smoke"):
        options.append("PROFILE=mini (--profile mini)")
    if plan != "r2d1_minatar":
        options.append("SUITE=minatar PROFILE=minatar_cpu (plan r2d1_minatar --profile minatar_cpu)")
    options.append("fewer GAMES or SEEDS")
    return "hint: that is days on this machine; smaller runs: " + ", or ".join(options)


def _estimate(
    plan, jobs, slots, fresh: bool, may_probe: bool, packs=None, k: int = 1, always_probe: bool = False
) -> None:
    """Print the plan's estimated duration on ``slots`` (repro/probe.py), and the hint when it is days;
    with ``packs`` (``--pack k``) packed and unpacked side by side, from probes of each arm alone and
    packed at each pack size.

    ``fresh`` (``--reprobe``): probe every arm and cache the results. Otherwise use cached measurements
    and probe the arms without one when ``always_probe`` (a dry run), or when ``may_probe`` and the
    probes are at most ``MAX_PROBE_SHARE`` of the env steps left."""
    from repro import probe as pr

    device = slots[0].device
    first = {}
    for job in jobs:
        first.setdefault(job.arm, job)
    packed = k > 1 and any(len(p) > 1 for p in packs)
    needed = list(dict.fromkeys([(arm, 1) for arm in first] + [(p[0].arm, len(p)) for p in packs or ()]))
    cache = pr.ProbeCache()
    probes = {}
    for arm, n in [] if fresh else needed:
        if result := cache.get(first[arm], device, n):
            probes[pr.probe_key(arm, n)] = result
    missing = [(arm, n) for arm, n in needed if pr.probe_key(arm, n) not in probes]
    left = sum(pr.steps_left(j) for j in jobs)
    if not left:
        print("estimated duration: nothing left to run (every job is complete)")
        return
    share = sum(pr.probe_steps(first[arm]) * n for arm, n in missing) / left
    if missing and not fresh and not always_probe and not (may_probe and share <= pr.MAX_PROBE_SHARE):
        why = "--no-probe" if not may_probe else f"a probe would add {share:.1%} to the env steps left"
        names = ", ".join(arm if n == 1 else f"{arm} packed by {n}" for arm, n in missing)
        print(
            f"estimated duration: not measured on this machine for {names} ({why}); "
            "a dry run with the probe (make repro-dry-run) measures it and keeps it for later runs"
        )
        return
    for arm, n in missing:
        job = first[arm]
        print(f"probing throughput: {arm} on {job.env}" + (f", {n} seeds packed" if n > 1 else "") + " ...")
        sys.stdout.flush()
        p = pr.probe_job(job, device) if n == 1 else pr.probe_pack(job, device, n)
        probes[pr.probe_key(arm, n)] = p
        cache.put(job, device, p, n)
        per = "job" if n == 1 else "pack"
        spread = (
            f" ({1 / p.per_step('high'):,.0f} to {1 / p.per_step('low'):,.0f} over its segments)"
            if not math.isnan(p.seconds_per_step_low)
            else ""
        )
        print(
            f"  {p.env_steps} env steps, {p.updates} updates: {1 / p.seconds_per_step:,.0f} env steps/s "
            f"with updates{spread}, {p.eval_s:.1f} s per evaluation, {p.fixed_s:.1f} s fixed cost and "
            f"{p.startup_s:.1f} s process start-up per {per}"
        )
        if p.updates == 0:
            print("  (no update within the probe: the estimate leaves learning time out)")
    cached = sorted(
        {probes[pr.probe_key(arm, n)].measured_at for arm, n in needed if (arm, n) not in missing}
    )
    source = f"throughput measured {', '.join(cached)} (cached in {cache.path})" if cached else "the probe"
    n_left = sum(1 for j in jobs if pr.steps_left(j))
    estimate = pr.estimate_range(jobs, probes, len(slots))
    shown = _duration_range(estimate)
    if packed:
        unpacked = shown
        estimate = pr.estimate_range(jobs, probes, len(slots), packs)
        n_packs = sum(1 for p in packs if any(pr.steps_left(j) for j in p))
        shown = (
            f"{_duration_range(estimate)} packed (--pack {k}: {n_packs} process(es)), {unpacked} unpacked,"
        )
    seconds = estimate.seconds
    print(
        f"estimated duration: {shown} for {n_left} job(s) left on {len(slots)} "
        f"{device} slot(s), from {source}; repro/probe.py",
        flush=True,
    )
    if seconds >= LONG_ESTIMATE_S:
        print(smaller_runs_hint(plan.name, jobs[0].profile), flush=True)


def _duration_range(estimate) -> str:
    from repro.tables import human_duration

    return (
        f"{human_duration(estimate.seconds)} (range {human_duration(estimate.low)} to "
        f"{human_duration(estimate.high)})"
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from repro.scheduler import detect_slots, stop_on_signals

    stop_on_signals()  # SIGTERM and SIGHUP stop the run as Ctrl-C does, from planning on
    plan, seeds, jobs = _plan_jobs(args)
    n_jobs = _positive_int_arg(args.jobs, "JOBS")
    if args.retries < 0:
        raise ConfigError(f"--retries must be >= 0, got {args.retries}")
    if args.backend not in ("local", "ray"):
        raise ConfigError(f"BACKEND must be 'local' or 'ray', got {args.backend!r}")
    cpus_per_job = _positive_int_arg(args.cpus_per_job, "CPUS_PER_JOB")
    gpus_per_job = _gpus_arg(args.gpus_per_job)
    threads = cpus_per_job or max(j.config.runner.torch_threads for j in jobs)
    if args.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("BACKEND=ray needs the ray extra: pip install -e '.[ray]'") from None
    slots = detect_slots(n_jobs, threads, gpus_per_job=gpus_per_job if args.backend == "local" else None)
    packs, pack = _packs(args.pack, jobs, len(slots), args.backend)
    if args.dry_run:
        _dry_run(plan, jobs, len(slots), slots[0].device if args.backend == "local" else "ray", packs, pack)
        if args.estimate:
            _estimate(
                plan, jobs, slots, fresh=args.reprobe, may_probe=args.probe, packs=packs, k=pack,
                always_probe=args.probe,
            )  # fmt: skip
        return 0
    if args.estimate and args.backend == "local":
        try:
            _estimate(plan, jobs, slots, fresh=False, may_probe=args.probe, packs=packs, k=pack)
        except KeyboardInterrupt:
            print("interrupted while estimating: no job was started")
            return 130
    from algorithms.logger import tracker_available
    from repro.record import write_plan_record

    if args.track and not tracker_available():
        print("--track: wandb is not installed (pip install wandb); runs are not tracked", file=sys.stderr)
    views = (["--tensorboard"] if args.tensorboard else []) + (["--track"] if args.track else [])
    tasks = _tasks(jobs, cpus_per_job, packs, views)
    if args.backend == "ray" and (code := _connect_ray(args, jobs, tasks)) is not None:
        return code
    try:
        write_plan_record(jobs[0].run_dir.parents[2], plan, jobs, seeds)
    except OSError as e:  # a full disk or a read-only root: nothing can run, say so in one line
        where = jobs[0].run_dir.parents[2]
        print(f"error: cannot write the plan record in {where}: {e.strerror or e}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    if args.backend == "ray":
        from repro.ray_backend import run_ray

        outcomes = run_ray(
            tasks, address=args.address, retries=args.retries, progress=not args.no_progress,
            gpus_per_job=gpus_per_job, shared_fs=args.shared_fs,
        )  # fmt: skip
    else:
        from repro.scheduler import run_local

        what = (
            f"{len(jobs)} jobs in {len(tasks)} processes" if len(tasks) < len(jobs) else f"{len(jobs)} jobs"
        )
        print(f"{what} on {len(slots)} {slots[0].device} slot(s)", file=sys.stderr)
        outcomes = run_local(tasks, slots, retries=args.retries, progress=not args.no_progress)
    wall = time.perf_counter() - start
    counts = {
        s: sum(o.state == s for o in outcomes)
        for s in ("complete", "skipped", "failed", "interrupted", "busy")
    }
    ran_steps = sum(t.steps for t, o in zip(tasks, outcomes) if o.state == "complete")
    busy = f", {counts['busy']} busy (written by another process)" if counts["busy"] else ""
    packed = f" ({len(jobs)} jobs in {len(tasks)} processes)" if len(tasks) < len(jobs) else ""
    print(
        f"{plan.name}{packed}: {counts['complete']} complete, {counts['skipped']} skipped (already "
        f"complete), {counts['failed']} failed, {counts['interrupted']} interrupted{busy} in {wall:.0f} s "
        f"wall ({ran_steps / wall if wall else 0:,.0f} env steps/s over the machine)"
    )
    for o in outcomes:
        if o.state in ("failed", "busy"):
            print(f"  {o.state}: {o.key}: {o.error}")
    experiment_dir = jobs[0].run_dir.parents[2]
    if experiment_dir.is_dir():
        from repro.summary import summary_text

        print("\n" + summary_text(experiment_dir))
    if counts["interrupted"]:
        print("interrupted: rerun the same command to continue from the checkpoints")
        return 130
    return 1 if counts["failed"] or counts["busy"] else 0


def _job_configs(args: argparse.Namespace, seeds: Sequence[int]) -> list:
    """The ``TrainConfig`` of the job of each seed, as the plan resolves it (with its ``--set`` values,
    the slot's device and the scheduler's threads); ``--tensorboard`` adds event files to the run
    without changing its arm, ``--track`` turns on the tracker (``algorithms.logger``)."""
    import dataclasses

    from algorithms.logger import TRACKER_ENV
    from repro.plans import parse_deviation, resolve_job_setting
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


def _as_job(body: Callable[[], None]) -> int:
    """Run ``body`` as a job of the scheduler: stop with it, and as on Ctrl-C at SIGTERM or SIGHUP also
    when started by hand (so status.json says interrupted); exit with ``BUSY_EXIT_CODE`` when a run
    directory is held by another process, ``NO_SPACE_EXIT_CODE`` on a full disk, 130 when interrupted."""
    import errno

    from algorithms.rundir import RunBusy
    from repro.scheduler import BUSY_EXIT_CODE, NO_SPACE_EXIT_CODE, follow_scheduler, stop_on_signals

    try:
        stop_on_signals()
        follow_scheduler()
        body()
    except RunBusy as e:
        print(f"error: {e}; this job did not start and wrote nothing", file=sys.stderr)
        return BUSY_EXIT_CODE
    except KeyboardInterrupt:
        print("interrupted: stopped; status.json says interrupted (rerun to continue)", file=sys.stderr)
        return 130
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        print(f"error: no space left on device writing {e.filename or 'the run'}", file=sys.stderr)
        return NO_SPACE_EXIT_CODE
    return 0


def _cmd_run_job(args: argparse.Namespace) -> int:
    from algorithms.train import train

    def body() -> None:
        (config,) = _job_configs(args, [args.seed])
        train(config, Path(args.run_dir), resume=True)

    return _as_job(body)


def _cmd_pack_job(args: argparse.Namespace) -> int:
    """Train the jobs of ``--seeds`` (one arm and env) in one process (``train_packed``), each into its
    ``--run-dir``. Members already complete are left alone; one left trains as a single run. When the
    members to continue are at different checkpoints (``PackMismatch``: a crash between two members'
    checkpoint writes), each continues alone with ``train``, one after another."""
    from algorithms.packed import PackMismatch, train_packed
    from algorithms.rundir import is_complete
    from algorithms.train import train
    from repro.plans import parse_seeds

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

    return _as_job(body)


def _cmd_summary(args: argparse.Namespace) -> int:
    from repro.summary import summary_text

    path = Path(args.experiment_dir)
    if not path.is_dir():
        raise ConfigError(f"experiment directory {path} does not exist")
    print(summary_text(path))
    return 0


def _add_set(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--set", action="append", default=None, metavar="SECTION.KEY=VALUE", help=f"{what} (repeatable)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m repro", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="shipped settings, profiles and plans")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="a setting resolved, every value with its source; a plan's arms")
    p.add_argument("setting", help="name, NAME@PROFILE, a path to a .toml file, or a plan's name")
    p.add_argument("--profile", default=None)
    _add_set(p, "a value of the setting, shown with origin 'command line'")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("diff", help="every hyperparameter that differs between two settings")
    p.add_argument("a")
    p.add_argument("b")
    _add_set(p, "a value of B (diff A A --set k=v lists what the override changes)")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("run", help="run (or --dry-run) a setting or an experiment plan")
    p.add_argument("plan", metavar="SETTING_OR_PLAN", help="a setting or a plan: a name or a .toml file")
    p.add_argument(
        "--seeds", default=None, help="a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)"
    )
    p.add_argument("--profile", default="paper")
    p.add_argument(
        "--env", action="append", default=None, help="an env for a setting (repeatable; default its env.id)"
    )
    p.add_argument("--games", default=None, help="comma-separated env ids replacing the plan's")
    p.add_argument("--arms", default=None, help="settings (names or paths, comma-separated) for the plan's")
    _add_set(p, "every arm's value; a,b,c sweeps: one arm per value (per combination of several keys)")
    p.add_argument("--tensorboard", action="store_true", help="TensorBoard event files in each run's tb/")
    p.add_argument(
        "--track", action="store_true", help="Weights & Biases (offline) per run when wandb is installed"
    )
    p.add_argument(
        "--pilot",
        default=None,
        help="tidy results (python -m analysis study --csv) or an experiment dir with results.csv: plan the "
        "seeds needed to detect --detect points (default: the plan's pilot)",
    )
    p.add_argument(
        "--detect", type=float, default=10.0, help="IQM difference to detect with 80%% power, points (10)"
    )
    p.add_argument("--exp", default=None, help="experiment name (default <plan or setting>-<profile>)")
    p.add_argument("--root", default=str(DEFAULT_ROOT))
    p.add_argument("--backend", default="local")
    p.add_argument("--address", default=None, help="Ray cluster address (BACKEND=ray)")
    p.add_argument("--jobs", default=None, help="slots (default: GPUs, else cores / torch threads)")
    p.add_argument("--cpus-per-job", default=None, help="CPUs per job, also its torch threads")
    p.add_argument(
        "--gpus-per-job",
        default=None,
        help="GPUs per job: 0.25 puts four jobs on a GPU (default 1 with GPUs)",
    )
    p.add_argument(
        "--shared-fs",
        action="store_true",
        help="BACKEND=ray: runs/ is at this path on every node; jobs write there (default: streamed here)",
    )
    p.add_argument(
        "--retries", type=int, default=2, help="retries of a failed job before it is marked failed"
    )
    p.add_argument("--dry-run", action="store_true")
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="estimate from cached throughput measurements only, never run the probe",
    )
    p.add_argument(
        "--reprobe",
        action="store_true",
        help="--dry-run: measure every arm afresh (default: reuse this machine's cached measurements)",
    )
    p.add_argument(
        "--no-estimate",
        dest="estimate",
        action="store_false",
        help="no estimated duration (neither probe nor cache)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--pack",
        default=None,
        help="K: train up to K seeds of an arm and env in one process; auto: K from the slots",
    )
    p.set_defaults(func=_cmd_run)

    for name, func, what in (
        ("run-job", _cmd_run_job, "train one job of a plan"),
        ("pack-job", _cmd_pack_job, "train several seeds of one arm and env of a plan in one process"),
    ):
        p = sub.add_parser(name, help=f"(used by the scheduler) {what}")
        p.add_argument("--arm", required=True)
        p.add_argument("--profile", required=True)
        p.add_argument("--env", required=True)
        if name == "run-job":
            p.add_argument("--seed", type=int, required=True)
            p.add_argument("--run-dir", required=True)
        else:
            p.add_argument("--seeds", required=True, help="a seed spec (1,2 or 0-4), one seed per --run-dir")
            p.add_argument("--run-dir", action="append", required=True, help="one per seed, in order")
        p.add_argument("--device", default=None)
        p.add_argument(
            "--threads", type=int, default=None, help="torch threads (the scheduler's CPUs per job)"
        )
        _add_set(p, "the job's --set values")
        p.add_argument(
            "--deviation", default=None, metavar="SETTING:NAME:KEYS", help="an ablation arm's deviation"
        )
        p.add_argument("--tensorboard", action="store_true")
        p.add_argument("--track", action="store_true")
        p.set_defaults(func=func)

    p = sub.add_parser("summary", help="throughput summary of runs/<experiment>")
    p.add_argument("experiment_dir")
    p.set_defaults(func=_cmd_summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a run directory that may not be read (imported only where one was read)
        from algorithms.rundir import RunUnreadable

        if not isinstance(e, RunUnreadable):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM/SIGHUP in `run`) before or after the jobs ran
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head`: stop quietly (Python docs, signal, SIGPIPE note)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
