"""``python -m repro run``: plan the jobs, check what they ask for, estimate their duration, write
the plan record, then run them on the local or the Ray backend and print what happened.

The command line's bad input is a ``ConfigError`` (one line, exit 2) before anything is written;
``cmd_run`` returns 1 when a job failed for good or its run was busy, and 130 when interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from algorithms.configs import ConfigError
from protocol.limits import Limit, check_limit
from protocol.plan_args import seeds_text
from protocol.registration import read_record
from repro.cli_estimate import design_power_plan, power_plan, print_estimate
from repro.cli_shared import CPU_ANSWER
from repro.memory import ReplayTooLarge
from repro.plan_file import PEER_NOTE
from repro.plans import plan_analysis
from repro.preregister import check_freeze, freeze
from repro.record import check_storage


def _plan_jobs(args: argparse.Namespace):
    """``(plan, seeds, jobs)`` of ``run``: a plan (a name or a ``.toml`` file with ``[plan]``), or a
    setting (a name or a ``.toml`` file with ``[setting]``) run on ``--env`` (default its own env)."""
    from algorithms.configs import unknown_key_message
    from protocol.plan_args import parse_list, parse_seeds
    from repro.plans import available_plans, expand, is_plan, load_plan, setting_plan
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
    if pilot and plan.design is not None:
        spec = design_power_plan(plan, pilot, games or plan.envs, args.detect, args.seeds, spec)
    elif pilot:
        spec = power_plan(plan, pilot, games or plan.envs, args.detect, args.seeds, spec)
    if spec is None:
        raise ConfigError("--seeds is required: a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)")
    seeds = parse_seeds(spec, first_seed=plan.first_seed)
    try:
        jobs = expand(
            plan, seeds, args.profile, Path(args.root), experiment=args.exp or None, envs=games, arms=arms,
            overrides=overrides,
        )  # fmt: skip
    except ReplayTooLarge as e:
        if plan.name != "r2d1":  # the Atari R2D1 question, which the CPU answer answers at MinAtar scale
            raise
        raise ConfigError(f"{e}; this machine can run: {CPU_ANSWER}") from None
    _check_one_job_per_run(plan, jobs)
    return plan, seeds, jobs


def _check_one_job_per_run(plan, jobs) -> None:
    """``ConfigError`` when two jobs would train into one run directory: an arm or env listed twice
    (also as a name and as a path to the same setting), which would run it twice at once and count
    it twice."""
    seen: dict = {}
    for job in jobs:
        other = seen.setdefault(job.run_dir, job)
        if other is not job:
            given = other.setting if other.setting == job.setting else f"{other.setting}' and '{job.setting}"
            raise ConfigError(
                f"{plan.path}: arm '{job.arm}' ('{given}') on env '{job.env}' is planned twice (an arm or "
                f"env listed twice): two jobs for one run directory, {job.run_dir.parent}"
            )


# A slot is a job's process and a job's CPUs are its torch threads: no machine this harness runs on
# has this many cores, so a larger value is a typo that would start that many processes or threads.
JOBS_LIMIT = Limit(
    "JOBS", 4096, "more slots than any machine has cores",
    lambda n: f"{n:,} slots would start as many job processes at once, each holding its own torch and envs",
)  # fmt: skip
CPUS_LIMIT = Limit(
    "CPUS_PER_JOB", 4096, "more CPUs than any machine has cores",
    lambda n: f"each job would start {n:,} torch threads",
)  # fmt: skip
RETRIES_LIMIT = Limit(
    "--retries", 100, "a job that failed 100 times fails for a reason a retry does not remove",
    lambda n: f"a failing job would run {n + 1:,} times",
)  # fmt: skip


def _positive_int_arg(text: str | None, name: str, limit: Limit | None = None) -> int | None:
    """``JOBS``, ``CPUS_PER_JOB`` or ``PACK``: empty (the default: ``None``) or a positive integer, up
    to ``limit`` when given (a pack is never larger than an arm's seeds, bounded by ``--seeds``)."""
    if text is None or not str(text).strip():
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
    if limit is not None:
        check_limit(limit, value)
    return value


def _profile_arg(path: Path) -> str:
    """A shipped profile by its name, so that job command lines (recorded in each run's
    metadata.json) carry no path of this checkout; any other profile file by its absolute path."""
    from protocol.files import is_shipped

    return path.stem if is_shipped(path) else str(Path(path).resolve())


def _tasks(jobs, cpus_per_job: int | None = None, packs=None, views: Sequence[str] = ()):
    """The scheduler's tasks: one per job (``run-job``), or one per pack of ``packs`` (``pack_jobs``;
    a pack of one is a job, of more a ``pack-job``)."""
    from protocol.plan_args import format_deviation, format_seeds
    from repro.tasks import Member, Task

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
    from algorithms.packed.pack import check_packable

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
    """Connect to the Ray cluster and check it can take the jobs, before anything is written; an exit
    code when not (130: Ctrl-C while connecting; bad input is a ``ConfigError``)."""
    from repro import ray_connect

    try:
        ray_connect.connect(args.address)
        gpus = _gpus_arg(args.gpus_per_job)
        if gpus is None:
            gpus = ray_connect.gpus_per_job_default()
        ray_connect.check_fits(max(t.threads for t in tasks), gpus)
    except KeyboardInterrupt:
        print(ray_connect.INTERRUPTED_CONNECTING, file=sys.stderr)
        return 130
    return None


def _dry_run(plan, jobs, n_slots: int, slot_kind: str, packs, k: int, afresh=frozenset()) -> None:
    """The plan's jobs, how far each got and the totals, then what the run would repair, in the lines
    the run says it with; ``afresh``: the keys of jobs whose runs ``--rerun-changed`` would move aside
    (all their steps left). Complete is the scheduler's own rule (``completion``): a run whose last row
    reaches its budget but whose status.json is missing or damaged, or whose rows miss one of the
    schedule, is not complete here either."""
    from algorithms.rundir import completion
    from repro.probe import steps_left
    from repro.tables import human_count, render

    print(f"plan {plan.name}: {plan.title}")
    print(f"experiment directory: {jobs[0].run_dir.parents[2]}")
    left = [j.n_steps if j.key in afresh else steps_left(j) for j in jobs]
    judged = [(False, None) if j.key in afresh else completion(j.run_dir, j.n_steps) for j in jobs]
    rows = [
        (j.key, human_count(j.n_steps), human_count(j.frames), j.config.runner.device, _progress(j, n, done))
        for j, n, (done, _) in zip(jobs, left, judged)
    ]
    print(render(["job", "env steps", "frames", "device", "done"], rows, align_right=(1, 2)))
    steps = sum(j.n_steps for j in jobs)
    frames = sum(j.frames for j in jobs)
    print(
        f"\n{len(jobs)} jobs, {steps:,} env steps, {frames:,} frames in total; {n_slots} {slot_kind} slot(s)"
    )
    complete = sum(done for done, _ in judged)
    started = sum(1 for j, n, (done, _) in zip(jobs, left, judged) if not done and n < j.n_steps)
    print(
        f"done: {complete} complete, {started} part-way, {len(jobs) - complete - started} not started; "
        f"{sum(left):,} of {steps:,} env steps left"
    )
    for job, (_, why) in zip(jobs, judged):
        if why is not None:
            print(f"{job.key}: {why}")
    if plan.peers:
        print("\n".join(f"{peer}: {PEER_NOTE}" for peer in plan.peers))
    if k > 1:
        rows = [(p[0].arm, p[0].env, ",".join(str(j.seed) for j in p), len(p)) for p in packs]
        print(f"\npacks (--pack {k}): {len(packs)} process(es) for {len(jobs)} jobs")
        print(render(["arm", "env", "seeds", "K"], rows, align_right=(3,)))


def _analysis_line(section, seeds, experiment_dir: Path) -> str:
    """The dry run's line on the plan's ``[analysis]``: which declared seed sets this run touches and
    whether each is frozen with this section already (``repro.preregister``)."""
    from protocol.plan_args import format_seeds

    frozen = {(r.get("seed_set"), r.get("hash")) for r in read_record(experiment_dir)}
    parts = []
    for name, declared in (("confirmatory", section.seeds), ("replication", section.replication_seeds)):
        if declared and set(seeds) & set(declared):
            state = "frozen" if (name, section.hash) in frozen else "freezes before its first job"
            parts.append(f"{name} seeds {format_seeds(declared)} ({state})")
    outside = sorted(set(seeds) - set(section.seeds) - set(section.replication_seeds))
    if outside:
        parts.append(f"seeds {seeds_text(outside)} in neither set: exploratory")
    return f"analysis {section.hash[:12]}: " + ("; ".join(parts) or "no seeds of this run")


def _progress(job, left: int, done: bool) -> str:
    """The dry run's "done" column: ``complete`` (``done``: ``completion``'s verdict), the env steps of
    the last progress row of a run that stopped, is running part-way or is not complete with all its
    rows (``resumes at 150k``), or nothing for a job not started."""
    from repro.tables import human_count

    if done:
        return "complete"
    if left < job.n_steps:
        return f"resumes at {human_count(job.n_steps - left)}"
    return ""


def _dry_run_hint(args: argparse.Namespace) -> str:
    """The user's own command with ``--dry-run``: what measures the throughput of what they ran."""
    import shlex

    from repro.cli_shared import invoked_as

    argv = [a for a in args.argv if a not in ("--no-probe", "--dry-run")]
    return " ".join([invoked_as(), *map(shlex.quote, argv), "--dry-run"])


def _report(args: argparse.Namespace, experiment_dir: Path, interrupted: bool) -> int | None:
    """The end of a run: build the report (``--report``; its exit code when that failed) or print the
    command that builds it (also after an interruption: the rerun that continues builds it)."""
    from repro.cli_shared import build_report, report_command

    if not args.report or interrupted:
        print(f"report: {report_command(experiment_dir)}")
        return None
    code = build_report(str(experiment_dir))
    return code or None


def cmd_run(args: argparse.Namespace) -> int:
    from repro.job_side import stop_on_signals
    from repro.scheduler import check_devices, detect_slots

    stop_on_signals()  # SIGTERM and SIGHUP stop the run as Ctrl-C does, from planning on
    # The options alone first: a value out of bounds is refused before the plan is resolved.
    n_jobs = _positive_int_arg(args.jobs, "JOBS", JOBS_LIMIT)
    if args.retries < 0:
        raise ConfigError(f"--retries must be >= 0, got {args.retries}")
    check_limit(RETRIES_LIMIT, args.retries)
    if args.backend not in ("local", "ray"):
        raise ConfigError(f"BACKEND must be 'local' or 'ray', got {args.backend!r}")
    cpus_per_job = _positive_int_arg(args.cpus_per_job, "CPUS_PER_JOB", CPUS_LIMIT)
    gpus_per_job = _gpus_arg(args.gpus_per_job)
    plan, seeds, jobs = _plan_jobs(args)
    if args.backend == "local":  # a Ray job's device is its node's, given by --gpus-per-job
        check_devices(j.config.runner.device for j in jobs)
    threads = cpus_per_job or max(j.config.runner.torch_threads for j in jobs)
    if args.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("BACKEND=ray needs the ray extra: pip install -e '.[ray]'") from None
        if n_jobs is not None:  # Ray, not this process, decides how many of the queued tasks run
            raise ConfigError(
                f"--jobs {n_jobs} sets this machine's slots; a Ray cluster runs as many jobs at once as "
                "its nodes hold: size each with --cpus-per-job and --gpus-per-job"
            )
    slots = detect_slots(n_jobs, threads, gpus_per_job=gpus_per_job if args.backend == "local" else None)
    packs, pack = _packs(args.pack, jobs, len(slots), args.backend)
    from repro.changed import check_unchanged

    afresh = check_unchanged(jobs, args.rerun_changed, args.dry_run)
    section = plan_analysis(plan)
    # What the run refuses before it writes anything, its dry run refuses alike.
    check_storage([j.run_dir for j in jobs])
    if section is not None:
        check_freeze(section, seeds, args.allow_dirty, plan.path)
    if args.dry_run:
        where = slots[0].device if args.backend == "local" else "ray"
        _dry_run(plan, jobs, len(slots), where, packs, pack, afresh)
        if section is not None:
            print(_analysis_line(section, seeds, jobs[0].run_dir.parents[2]))
        if args.estimate:
            print_estimate(
                plan, jobs, slots, fresh=args.reprobe, may_probe=args.probe, packs=packs, k=pack,
                always_probe=args.probe, dry_run_hint=_dry_run_hint(args),
            )  # fmt: skip
        return 0
    if args.estimate and args.backend == "local":
        try:
            print_estimate(
                plan, jobs, slots, fresh=False, may_probe=args.probe, packs=packs, k=pack,
                dry_run_hint=_dry_run_hint(args),
            )  # fmt: skip
        except KeyboardInterrupt:
            print("interrupted while estimating: no job was started")
            return 130
    from algorithms.logger import tracker_available
    from repro.record import invocation_note, write_plan_record

    if args.track and not tracker_available():
        print(
            "--track: wandb is not installed (pip install -c constraints.txt -e '.[track]'); runs are not "
            "tracked",
            file=sys.stderr,
        )
    views = (["--tensorboard"] if args.tensorboard else []) + (["--track"] if args.track else [])
    tasks = _tasks(jobs, cpus_per_job, packs, views)
    if args.backend == "ray" and (code := _connect_ray(args, jobs, tasks)) is not None:
        return code
    if section is not None:
        # Frozen before the first job of a seed set starts, so every run it covers starts after it.
        print(
            freeze(jobs[0].run_dir.parents[2], plan.path, section, seeds, args.allow_dirty).line,
            file=sys.stderr,
        )
    if note := invocation_note(jobs[0].run_dir.parents[2], plan, jobs, seeds):
        print(note)
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
        from repro.cli_shared import print_ending
        from repro.summary import summary_text

        if args.verbose:
            print("\n" + summary_text(experiment_dir))
        print()
        print_ending(experiment_dir)
        if (code := _report(args, experiment_dir, counts["interrupted"] > 0)) is not None:
            return code
    if counts["interrupted"]:
        print("interrupted: rerun the same command to continue from the checkpoints")
        return 130
    return 1 if counts["failed"] or counts["busy"] else 0
