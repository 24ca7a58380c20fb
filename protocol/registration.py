"""A plan's analysis, fixed before the data: the ``[analysis]`` table of a plan file, read and checked
(``parse_section``), and the freezes an experiment records (``read_record``; ``repro.preregister``
writes them before the first job of a seed set starts).

A plan may declare how its results will be read, before any run exists::

    [analysis]
    alpha = 0.05
    correction = "holm"                  # across the primary endpoints: holm | bonferroni | bh | none
    seeds = "300-302"                    # the confirmatory seed set
    replication_seeds = "310-312"        # optional: a second set, with a verdict of its own
    pool = false                         # whether the two sets may ever be read pooled (default false)
    rationale = "why these endpoints"    # optional

    [[analysis.endpoints]]
    name = "breakout_endpoints"
    kind = "game"                        # game | aggregate | effect | equivalence
    game = "minatar_breakout"
    baseline = "r2d1_minatar_corrected"  # game and aggregate endpoints compare two arms
    candidate = "rlpyt_r2d1_minatar_published"
    test = "mann_whitney"                # game: mann_whitney | welch; aggregate: bootstrap; effect: t;
                                         # equivalence: tost | noninferiority
    sides = "less"                       # two | greater | less: the candidate's (or switch-on) side

An ``aggregate`` endpoint names a ``metric`` (``AGGREGATE_METRICS``) over the plan's games; an
``effect`` endpoint the main effect of one ``switch`` of a factorial design (repro/configs/README.md,
"Ablation plans"), on one ``game`` or, without one, on the aggregate. An ``equivalence`` endpoint
(``analysis.equivalence``) compares the ``candidate`` arm on one ``game`` with a reference, within a
``margin`` in the score's own units: a ``baseline`` arm (ours, or a peer's named in the plan's
``peers``), or a published ``reference`` value with, optionally, its standard deviation
``reference_sd`` over ``reference_n`` runs and its ``reference_source``. ``score`` says which return
is compared (``SCORES``): the final evaluation or the mean of the last 100 training episodes. TOST
(``sides = "two"``) claims "equivalent within +-margin"; ``noninferiority`` claims "no worse than the
reference by more than the margin" on the named side (``greater``: higher is better). A ``change``
endpoint asks whether a game's gap between two arms changes over training: the same runs'
evaluations at ``from_steps`` and ``to_steps`` (env steps), Welch's t on each run's own change, the
candidate's against the baseline's. Any endpoint with ``secondary = true`` stays outside the family:
its p is its own, never adjusted with the others'::

    [[analysis.endpoints]]
    name = "pong_ours_vs_sb3"
    kind = "equivalence"
    game = "pong"
    candidate = "ppo_atari_zoo"
    baseline = "sb3_ppo_atari_zoo"       # or: reference = 20.7, reference_sd = 0.3, reference_n = 3
    score = "training"
    test = "tost"
    sides = "two"
    margin = 5.0

    [[analysis.endpoints]]
    name = "gap_change"
    kind = "change"
    game = "minatar_breakout"
    baseline = "r2d1_minatar_corrected"
    candidate = "rlpyt_r2d1_minatar_published"
    from_steps = 250_000
    to_steps = 1_000_000
    sides = "two"
    secondary = true
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError, unknown_key_message
from algorithms.rundir import read_regular
from protocol.files import REPO_ROOT, repo_path
from protocol.plan_args import parse_seeds, seeds_text

RECORD_FILE = "preregistration.json"
CORRECTIONS = ("holm", "bonferroni", "bh", "none")
SIDES = ("two", "greater", "less")
ENDPOINT_KINDS = ("game", "aggregate", "effect", "equivalence", "change")
AGGREGATE_METRICS = ("iqm", "median", "mean", "optimality_gap", "probability_of_improvement")
TESTS = {
    "game": ("mann_whitney", "welch"), "aggregate": ("bootstrap",), "effect": ("t",),
    "equivalence": ("tost", "noninferiority"), "change": ("welch",),
}  # fmt: skip
# What an equivalence endpoint compares: the mean return of the final evaluation (eval.csv), or the
# mean return of the last 100 training episodes at the final row (progress.csv), the protocol of
# published Atari learning curves (analysis/published.py).
SCORES = ("evaluation", "training")
REFERENCE_KEYS = ("reference", "reference_sd", "reference_n", "reference_source")
SECTION_KEYS = {
    "alpha": float, "correction": str, "seeds": str | int, "replication_seeds": str | int, "pool": bool,
    "rationale": str, "endpoints": list,
}  # fmt: skip
ENDPOINT_KEYS = {
    "name": str, "kind": str, "game": str, "baseline": str, "candidate": str, "metric": str, "switch": str,
    "test": str, "sides": str, "rationale": str, "margin": float, "score": str, "reference": float,
    "reference_sd": float, "reference_n": int, "reference_source": str, "from_steps": int, "to_steps": int,
    "secondary": bool,
}  # fmt: skip


@dataclass(frozen=True)
class Endpoint:
    """One primary endpoint (module doc). ``sides``: the direction the hypothesis names, of the
    candidate minus the baseline (an effect: switch on minus off)."""

    name: str
    kind: str
    test: str
    sides: str
    game: str | None = None
    baseline: str | None = None
    candidate: str | None = None
    metric: str | None = None
    switch: str | None = None
    rationale: str = ""
    margin: float | None = None  # an equivalence endpoint's margin, in the score's units
    score: str = "evaluation"  # SCORES: which return an equivalence endpoint compares
    reference: float | None = None  # a published value instead of a baseline arm
    reference_sd: float | None = None
    reference_n: int | None = None
    reference_source: str = ""
    from_steps: int | None = None  # a change endpoint's two evaluations, in env steps
    to_steps: int | None = None
    secondary: bool = False  # outside the family: its own p, never adjusted with the others

    @property
    def steps_text(self) -> str:
        return f"{self.from_steps:,} to {self.to_steps:,} env steps"


@dataclass(frozen=True)
class AnalysisSection:
    """A plan's ``[analysis]`` table, checked (module doc); ``raw``: the table as read, what is hashed."""

    endpoints: tuple[Endpoint, ...]
    alpha: float
    correction: str
    seeds: tuple[int, ...]
    replication_seeds: tuple[int, ...]
    pool: bool
    rationale: str
    raw: Mapping[str, Any]

    @property
    def family(self) -> tuple[str, ...]:
        """The endpoints adjusted together with the section's correction: all but the secondary."""
        return tuple(e.name for e in self.endpoints if not e.secondary)

    @property
    def hash(self) -> str:
        return section_hash(self.raw)

    def seed_set(self, seed: int) -> str | None:
        """``"confirmatory"``, ``"replication"`` or None: which declared set ``seed`` belongs to."""
        if seed in self.seeds:
            return "confirmatory"
        if seed in self.replication_seeds:
            return "replication"
        return None


def section_hash(raw: Mapping[str, Any]) -> str:
    """SHA-256 of the table's canonical JSON (sorted keys): the same table, however formatted in the
    file, has one hash; any changed value changes it."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_keys(table: Mapping[str, Any], keys: Mapping[str, Any], where: str) -> None:
    for key, value in table.items():
        if key not in keys:
            raise ConfigError(f"{where}: unknown key '{key}'; " + unknown_key_message(key, list(keys)))
        kind = keys[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                continue
            expected = (
                "a seed spec" if key in ("seeds", "replication_seeds") else getattr(kind, "__name__", kind)
            )
            raise ConfigError(f"{where} '{key}': expected {expected}, got {type(value).__name__}")


def _choice(value: str, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return value


def parse_endpoint(
    table: Any,
    index: int,
    where: str,
    arms: Sequence[str] | None,
    envs: Sequence[str] | None,
    switches: Sequence[str] | None,
) -> Endpoint:
    """One ``[[analysis.endpoints]]`` table, checked against the plan's arms, envs and switches (None:
    not checked, for a section read back from a freeze)."""
    where = f"{where} endpoint {index + 1}"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(table).__name__}")
    _check_keys(table, ENDPOINT_KEYS, where)
    for key in ("kind", "sides"):
        if key not in table:
            raise ConfigError(f"{where}: missing required key '{key}'")
    kind = _choice(table["kind"], ENDPOINT_KINDS, f"{where} 'kind'")
    sides = _choice(table["sides"], SIDES, f"{where} 'sides'")
    test = _choice(table.get("test", TESTS[kind][0]), TESTS[kind], f"{where} 'test' (kind {kind})")
    needed = {"game": ("game", "baseline", "candidate"), "aggregate": ("metric", "baseline", "candidate"),
              "effect": ("switch",), "equivalence": ("game", "candidate", "margin"),
              "change": ("game", "baseline", "candidate", "from_steps", "to_steps")}[kind]  # fmt: skip
    for key in needed:
        if key not in table:
            raise ConfigError(f"{where}: kind {kind!r} needs '{key}'")
    allowed = (
        set(needed)
        | {"name", "kind", "test", "sides", "rationale", "secondary"}
        | ({"game"} if kind == "effect" else set())
        | ({"baseline", "score", *REFERENCE_KEYS} if kind == "equivalence" else set())
    )
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where} '{key}': not a key of a {kind!r} endpoint")
    if kind == "equivalence":
        _check_equivalence(table, test, sides, where)
    if kind == "change" and not 0 < table["from_steps"] < table["to_steps"]:
        raise ConfigError(
            f"{where} 'to_steps': expected 0 < from_steps < to_steps, got {table['from_steps']} and "
            f"{table['to_steps']}"
        )
    if "game" in table and envs is not None and table["game"] not in envs:
        raise ConfigError(
            f"{where} 'game': {table['game']!r} is not an env of the plan; "
            + unknown_key_message(table["game"], list(envs))
        )
    for key in ("baseline", "candidate"):
        if key in table and arms is not None and table[key] not in arms:
            raise ConfigError(
                f"{where} '{key}': {table[key]!r} is not an arm of the plan; "
                + unknown_key_message(table[key], list(arms))
            )
    if "baseline" in table and table["baseline"] == table["candidate"]:
        raise ConfigError(f"{where}: baseline and candidate are the same arm, {table['baseline']!r}")
    if "metric" in table:
        _choice(table["metric"], AGGREGATE_METRICS, f"{where} 'metric'")
    if "switch" in table and switches is not None and table["switch"] not in switches:
        known = f"; {unknown_key_message(table['switch'], list(switches))}" if switches else ""
        raise ConfigError(
            f"{where} 'switch': {table['switch']!r} is not a switch of the plan's design{known}"
            if switches
            else f"{where} 'switch': an effect endpoint needs a factorial design (design = ...)"
        )
    name = table.get("name") or "_".join(
        str(table[k]) for k in ("kind", "switch", "metric", "game") if k in table
    )
    return Endpoint(
        name, kind, test, sides, table.get("game"), table.get("baseline"), table.get("candidate"),
        table.get("metric"), table.get("switch"), table.get("rationale", ""),
        float(table["margin"]) if "margin" in table else None, table.get("score", "evaluation"),
        float(table["reference"]) if "reference" in table else None,
        float(table["reference_sd"]) if "reference_sd" in table else None, table.get("reference_n"),
        table.get("reference_source", ""), table.get("from_steps"), table.get("to_steps"),
        bool(table.get("secondary", False)),
    )  # fmt: skip


def _check_equivalence(table: Mapping[str, Any], test: str, sides: str, where: str) -> None:
    """An equivalence endpoint's own keys (module doc): a finite positive margin, one reference (a
    baseline arm or a published value), a published spread as a standard deviation over at least 2
    runs, a known score, and sides that fit the test."""
    margin = table["margin"]
    if not (math.isfinite(margin) and margin > 0):
        raise ConfigError(f"{where} 'margin': expected a finite number above 0, got {margin}")
    if ("baseline" in table) == ("reference" in table):
        raise ConfigError(
            f"{where}: an equivalence endpoint compares with exactly one of 'baseline' (an arm) or "
            "'reference' (a published value)"
        )
    if "baseline" in table and (given := [k for k in REFERENCE_KEYS if k in table]):
        raise ConfigError(
            f"{where} '{given[0]}': a published reference's key, but the endpoint has a baseline arm"
        )
    if "reference" in table and not math.isfinite(table["reference"]):
        raise ConfigError(f"{where} 'reference': expected a finite number, got {table['reference']}")
    if ("reference_sd" in table) != ("reference_n" in table):
        given, absent = (
            ("reference_sd", "reference_n") if "reference_sd" in table else ("reference_n", "reference_sd")
        )
        raise ConfigError(
            f"{where} '{given}': a published spread needs both reference_sd and reference_n; "
            f"'{absent}' is missing"
        )
    if "reference_sd" in table and not (math.isfinite(table["reference_sd"]) and table["reference_sd"] >= 0):
        raise ConfigError(
            f"{where} 'reference_sd': expected a finite standard deviation >= 0, got {table['reference_sd']}"
        )
    if "reference_n" in table and table["reference_n"] < 2:
        raise ConfigError(
            f"{where} 'reference_n': a standard deviation needs at least 2 runs, got {table['reference_n']}"
        )
    _choice(table.get("score", "evaluation"), SCORES, f"{where} 'score'")
    if test == "tost" and sides != "two":
        raise ConfigError(
            f"{where} 'sides': a TOST tests both margins (sides = \"two\"), got {sides!r}; a one-sided "
            'claim is test = "noninferiority"'
        )
    if test == "noninferiority" and sides == "two":
        raise ConfigError(
            f'{where} \'sides\': non-inferiority is one-sided: "greater" (higher is better) or "less"; '
            'both margins is test = "tost"'
        )


def parse_section(
    raw: Any,
    where: str,
    arms: Sequence[str] | None,
    envs: Sequence[str] | None,
    switches: Sequence[str] | None = (),
) -> AnalysisSection:
    """A plan's ``[analysis]`` table, checked: every key known, every endpoint naming the plan's own
    arms, games and switches, a known test, sides and correction, 0 < alpha < 1, and seed sets that
    do not overlap; ``ConfigError`` (one line naming ``where`` and the key) otherwise. ``arms``: the
    names of the plan's arms as their run directories have them."""
    where = f"{where} [analysis]"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
    _check_keys(raw, SECTION_KEYS, where)
    for key in ("endpoints", "seeds", "alpha", "correction"):
        if key not in raw:
            raise ConfigError(f"{where}: missing required key '{key}'")
    alpha = float(raw["alpha"])
    if not 0 < alpha < 1:
        raise ConfigError(f"{where} 'alpha': expected a level between 0 and 1, got {raw['alpha']}")
    correction = _choice(raw["correction"], CORRECTIONS, f"{where} 'correction'")
    seeds = parse_seeds(str(raw["seeds"]), f"{where} 'seeds'")
    again = (
        parse_seeds(str(raw["replication_seeds"]), f"{where} 'replication_seeds'")
        if "replication_seeds" in raw
        else ()
    )
    if shared := sorted(set(seeds) & set(again)):
        raise ConfigError(
            f"{where} 'replication_seeds': seeds {seeds_text(shared)} are also in 'seeds'; a replication "
            "runs other seeds"
        )
    if raw.get("pool") and not again:
        raise ConfigError(f"{where} 'pool': pooling needs 'replication_seeds'")
    if not raw["endpoints"]:
        raise ConfigError(f"{where} 'endpoints': expected at least one endpoint")
    endpoints = tuple(
        parse_endpoint(t, i, where, arms, envs, switches) for i, t in enumerate(raw["endpoints"])
    )
    names = [e.name for e in endpoints]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"{where} 'endpoints': name {dup[0]!r} is given to more than one endpoint")
    return AnalysisSection(
        endpoints, alpha, correction, tuple(seeds), tuple(again), bool(raw.get("pool", False)),
        raw.get("rationale", ""), raw,
    )  # fmt: skip


def plan_label(path: Path) -> str:
    """How a freeze names its plan file: relative to the repository when inside it (a clone or a
    worktree elsewhere finds it again: ``plan_file``), else absolute."""
    return repo_path(path)


def plan_file(label: str) -> Path:
    """The plan file a freeze names (``plan_label``), in this checkout."""
    return Path(label) if Path(label).is_absolute() else REPO_ROOT / label


def read_record(experiment_dir: Path) -> list[dict[str, Any]]:
    """The freezes recorded in ``experiment_dir`` (oldest first); [] when none. A damaged record is a
    ``ValueError`` naming the file: a pre-registration must never be read as absent by mistake."""
    path = Path(experiment_dir) / RECORD_FILE
    if not path.exists():
        return []
    try:
        data = json.loads(read_regular(path).decode("utf-8"))  # a FIFO there must not block a read
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable pre-registration record ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("freezes"), list):
        raise ValueError(f"{path}: unreadable pre-registration record (no 'freezes' list)")
    return data["freezes"]
