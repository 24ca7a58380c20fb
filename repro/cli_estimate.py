"""The estimated duration ``run`` prints before the jobs start (and ``run --dry-run`` with the
plan), from throughput measured by the probe (``repro.probe``) and cached per machine."""

from __future__ import annotations

import math
import sys

from repro.cli import LONG_ESTIMATE_S, smaller_runs_hint


def print_estimate(
    plan, jobs, slots, fresh: bool, may_probe: bool, packs=None, k: int = 1, always_probe: bool = False,
    *, dry_run_hint: str,
) -> None:  # fmt: skip
    """Print the plan's estimated duration on ``slots`` (repro/probe.py), and the hint when it is days;
    with ``packs`` (``--pack k``) packed and unpacked side by side, from probes of each arm alone and
    packed at each pack size.

    ``fresh`` (``--reprobe``): probe every arm and cache the results. Otherwise use cached measurements
    and probe the arms without one when ``always_probe`` (a dry run), or when ``may_probe`` and the
    probes are at most ``MAX_PROBE_SHARE`` of the env steps left. ``dry_run_hint``: the dry run of the
    user's command, named when nothing is measured."""
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
            f"a dry run with the probe ({dry_run_hint}) measures it and keeps it for later runs"
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
