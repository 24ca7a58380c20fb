"""The estimated duration ``run`` prints before the jobs start (and ``run --dry-run`` with the
plan), from throughput measured by the probe (``repro.probe``) and cached per machine; and the seeds
``run --pilot`` plans from a pilot's spread (``repro.power``)."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

from algorithms.configs import ConfigError
from repro.cli_shared import LONG_ESTIMATE_S, smaller_runs_hint


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


def power_plan(plan, pilot: str, envs, detect: float, given: str | None, spec: str | None) -> str:
    """Print the seeds per arm and game needed to detect an IQM difference of ``detect`` points with
    80% power in the plan's frozen family, from the pilot table (``repro.power``), and return the seed
    spec to run: ``given`` (``--seeds``) with the power it has, else that many seeds (at least
    ``MIN_SEEDS``) from the first seed of the plan's ``spec`` (0 without one)."""
    from protocol.plan_args import parse_seeds
    from repro.power import Family, frozen_family, plan_seeds

    if not detect > 0:
        raise ConfigError(f"--detect {detect}: the IQM difference to detect must be positive (points)")
    family = frozen_family(plan.analysis, f"plan {plan.name}")
    found = plan_seeds(pilot, envs, delta=detect / 100, family=family)
    spread = ", ".join(f"{arm} {se * 100:.3g}" for arm, se in found.arm_se.items())
    print(
        f"power plan: pilot {found.source} ({found.pilot_seeds} seeds x {len(found.games)} games: "
        f"{', '.join(found.games)}); SE of each arm's IQM (points): {spread}"
    )
    print(
        f"  to detect an IQM difference of {detect:g} points with {found.power:.0%} power ({family.text}; "
        f"the spread's 80% upper limit, x{found.upper:.2f}) each arm needs {found.seeds} seeds per game "
        "(at least 5)"
    )
    if given is not None:
        n = len(parse_seeds(given))
        single = replace(found, family=Family(family.alpha)).detectable_with(n)
        print(
            f"  --seeds {given}: {n} seeds per game have {found.power_with(n):.0%} power at {detect:g} "
            f"points; the smallest difference detected with {found.power:.0%} power at the family level "
            f"({family.text}) is {found.detectable_with(n) * 100:.3g} points ({single * 100:.3g} for one "
            f"two-sided test at alpha {family.alpha:g})"
        )
        return given
    return _chosen_seeds(spec, found.seeds, plan.first_seed)


def _chosen_seeds(spec: str | None, count: int, first_seed: int) -> str:
    """``count`` seeds from the first of the plan's seed spec: a count starts at the plan's
    ``first_seed``, a range or list (fresh seeds, 100-104) at its first seed; the seeds kept for
    outside checks are stepped over (``seeds_from``)."""
    from protocol.plan_args import format_seeds, parse_seeds, seeds_from

    first = first_seed if spec is None or str(spec).strip().isdigit() else parse_seeds(spec)[0]
    chosen = format_seeds(seeds_from(first, count))
    print(f"  seeds: {chosen} (give --seeds to choose others)")
    return chosen


def design_power_plan(plan, pilot: str, envs, detect: float, given: str | None, spec: str | None) -> str:
    """``power_plan`` of a designed ablation: the seeds per arm for a t test of each main effect to
    detect ``detect`` points with 80% power in the plan's frozen family (``repro.power.Family``), from
    the pilot's pooled within-arm spread (``repro.power.plan_design_seeds``)."""
    from protocol.plan_args import parse_seeds
    from repro.ablation import ablation_arms
    from repro.power import Family, frozen_family, plan_design_seeds

    if not detect > 0:
        raise ConfigError(f"--detect {detect}: the main effect to detect must be positive (points)")
    arms = len(ablation_arms(plan))
    family = frozen_family(plan.analysis, f"plan {plan.name}")
    found = plan_design_seeds(pilot, envs, arms, detect / 100, family=family)
    print(
        f"power plan: pilot {found.source} ({', '.join(found.games)}); SD of a run's score pooled within "
        f"its arms: {found.pilot_sd * 100:.3g} points ({found.pilot_df} df; its 80% upper limit "
        f"x{found.upper:.2f}: {found.sigma * 100:.3g})"
    )
    print(
        f"  a main effect over {arms} arms x s seeds has standard error 2 SD / sqrt({arms} s); to detect "
        f"{detect:g} points with {found.power:.0%} power ({family.text}) each arm needs "
        f"{found.seeds} seeds per game (at least 2)"
    )
    n = len(parse_seeds(given)) if given is not None else found.seeds
    single = found.detectable_with(n, Family(family.alpha))
    print(
        f"  {n} seeds per arm have {found.power_with(n):.0%} power at {detect:g} points (SE "
        f"{found.se(n) * 100:.3g}); the smallest main effect detected with {found.power:.0%} power at the "
        f"family level ({family.text}) is {found.detectable_with(n) * 100:.3g} points ({single * 100:.3g} "
        f"for one two-sided test at alpha {family.alpha:g})"
    )
    return given if given is not None else _chosen_seeds(spec, found.seeds, plan.first_seed)
