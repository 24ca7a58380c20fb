"""The plan file's fields (``repro/configs/plans/<name>.toml``, read by ``repro.plans.load_plan``):
its own module so that what builds arms from a plan (``repro.ablation``) need not import the planner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAN_KEYS = {
    "title": str, "description": str, "arms": list, "envs": list, "envs_source": str, "seeds": str | int,
    "ablate": str, "pilot": str, "design": str, "resolution": int, "generators": list, "peers": list,
    "first_seed": int,
}  # fmt: skip
# Top-level tables a plan file may hold beside [plan]: [analysis], the frozen analysis of a
# pre-registered study, which the plan carries unread (``Plan.analysis``) for analysis to check.
PLAN_TABLES = {"plan", "analysis"}
# How ``show`` and the dry run name a plan's peer arms (``Plan.peers``).
PEER_NOTE = "a peer arm, run by another program into the experiment (not by run)"


@dataclass(frozen=True)
class Plan:
    name: str
    path: Path
    title: str
    description: str
    arms: tuple[str, ...]
    envs: tuple[str, ...]
    envs_source: str
    seeds: str | None = None  # the plan's seed spec (``parse_seeds``), the default of ``--seeds``
    # Where a count of seeds (``--seeds 3``) starts: a plan that must run on fresh seeds, away from
    # the sets earlier studies used, counts from here (``parse_seeds``); 0 for every other plan.
    first_seed: int = 0
    setting: str | None = None  # a setting run without a plan file (``setting_plan``): its name or path
    ablate: str | None = None  # the setting whose deviations from the one arm make leave-one-out arms
    pilot: str | None = None  # tidy results the seed planner (repro/power.py) reads, relative to the repo
    design: str | None = None  # a designed ablation: "factorial" or "fractional" (protocol/design.py)
    resolution: int | None = None  # a fractional design's resolution (the standard fraction's, or a floor)
    generators: tuple[str, ...] = ()  # a fractional design's generators, "E=BCD"
    analysis: dict[str, Any] | None = None  # the plan file's [analysis] table, as written (PLAN_TABLES)
    # Arms whose runs another program writes into the experiment (a peer library driven by a bench
    # script, bench/sb3_ppo_atari.py): ``run`` never runs them; an [analysis] endpoint may name them.
    peers: tuple[str, ...] = ()
