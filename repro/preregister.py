"""A plan's analysis, fixed before the data: the ``[analysis]`` table of a plan file, checked, and
frozen in the experiment before the first job of a seed set starts.

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
    kind = "game"                        # game | aggregate | effect
    game = "minatar_breakout"
    baseline = "r2d1_minatar_corrected"  # game and aggregate endpoints compare two arms
    candidate = "rlpyt_r2d1_minatar_published"
    test = "mann_whitney"                # game: mann_whitney | welch; aggregate: bootstrap; effect: t
    sides = "less"                       # two | greater | less: the candidate's (or switch-on) side

An ``aggregate`` endpoint names a ``metric`` (``AGGREGATE_METRICS``) over the plan's games; an
``effect`` endpoint the main effect of one ``switch`` of a factorial design (repro/configs/README.md,
"Ablation plans"), on one ``game`` or, without one, on the aggregate.

Why freeze: an analysis chosen after a look at the data (which seeds to pool, which test, which
games) makes its p-values and intervals mean less than they say (Simmons, Nelson & Simonsohn 2011,
"False-Positive Psychology", Psychological Science 22(11); Nosek et al. 2018, "The preregistration
revolution", PNAS 115(11)). ``freeze`` writes the section, its hash, the code's commit and the time
into ``<experiment>/preregistration.json`` before the first job of a seed set runs, and refuses a
tree with uncommitted changes unless ``--allow-dirty`` (then recorded). The analysis layer
(``analysis.confirmatory``) compares each run's own start time and commit with the freeze to label
every result pre-registered or exploratory.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError, unknown_key_message
from algorithms.rundir import atomic_write_json, git_state
from repro.plan_args import format_seeds, parse_seeds
from repro.profiles import REPO_ROOT

RECORD_FILE = "preregistration.json"
CORRECTIONS = ("holm", "bonferroni", "bh", "none")
SIDES = ("two", "greater", "less")
KINDS = ("game", "aggregate", "effect")
AGGREGATE_METRICS = ("iqm", "median", "mean", "optimality_gap", "probability_of_improvement")
TESTS = {"game": ("mann_whitney", "welch"), "aggregate": ("bootstrap",), "effect": ("t",)}
SECTION_KEYS = {
    "alpha": float, "correction": str, "seeds": str | int, "replication_seeds": str | int, "pool": bool,
    "rationale": str, "endpoints": list,
}  # fmt: skip
ENDPOINT_KEYS = {
    "name": str, "kind": str, "game": str, "baseline": str, "candidate": str, "metric": str, "switch": str,
    "test": str, "sides": str, "rationale": str,
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
    def hash(self) -> str:
        return section_hash(self.raw)

    def seed_set(self, seed: int) -> str | None:
        """``"confirmatory"``, ``"replication"`` or None: which declared set ``seed`` belongs to."""
        if seed in self.seeds:
            return "confirmatory"
        if seed in self.replication_seeds:
            return "replication"
        return None


def seeds_text(seeds: Sequence[int]) -> str:
    """Seeds as a reader reads them: ``format_seeds``'s spec, but one seed as itself ("7", not "7-7")."""
    return str(seeds[0]) if len(seeds) == 1 else format_seeds(seeds)


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
    kind = _choice(table["kind"], KINDS, f"{where} 'kind'")
    sides = _choice(table["sides"], SIDES, f"{where} 'sides'")
    test = _choice(table.get("test", TESTS[kind][0]), TESTS[kind], f"{where} 'test' (kind {kind})")
    needed = {"game": ("game", "baseline", "candidate"), "aggregate": ("metric", "baseline", "candidate"),
              "effect": ("switch",)}[kind]  # fmt: skip
    for key in needed:
        if key not in table:
            raise ConfigError(f"{where}: kind {kind!r} needs '{key}'")
    allowed = (
        set(needed)
        | {"name", "kind", "test", "sides", "rationale"}
        | ({"game"} if kind == "effect" else set())
    )
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where} '{key}': not a key of a {kind!r} endpoint")
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
    if kind != "effect" and table["baseline"] == table["candidate"]:
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
    )  # fmt: skip


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
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable pre-registration record ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("freezes"), list):
        raise ValueError(f"{path}: unreadable pre-registration record (no 'freezes' list)")
    return data["freezes"]


@dataclass(frozen=True)
class Freeze:
    """What ``freeze`` did: the entries it added (none when every seed set it runs was frozen with
    this section already), and the line ``run`` prints."""

    added: tuple[dict[str, Any], ...]
    line: str


def freeze(
    experiment_dir: Path,
    plan_path: Path,
    section: AnalysisSection,
    seeds: Sequence[int],
    allow_dirty: bool,
    code_dir: Path | None = None,
    now: dt.datetime | None = None,
) -> Freeze:
    """Record ``section`` in ``experiment_dir/preregistration.json`` for each declared seed set that
    ``seeds`` (this invocation's) touch and that has no freeze of this section yet: its hash, the
    section, the commit, whether the tree was dirty, the time. A set frozen before with another
    section gets a second entry (the change is shown on top of every report, never refused: the
    runs exist). Seeds outside both declared sets are exploratory and freeze nothing. A tree with
    uncommitted changes is a ``ConfigError`` unless ``allow_dirty``; an unknown commit (no git) too."""
    touched = [s for s in ("confirmatory", "replication") if any(section.seed_set(x) == s for x in seeds)]
    outside = sorted(x for x in seeds if section.seed_set(x) is None)
    note = (
        f"; seeds {seeds_text(outside)} are in neither declared set: their results are exploratory"
        if outside
        else ""
    )
    if not touched:
        return Freeze((), f"analysis: no declared seed set in this run{note}")
    commit, dirty = git_state(code_dir)
    if commit is None:
        raise ConfigError(
            "[analysis]: cannot read the code's git commit; a pre-registered run needs a git checkout"
        )
    if dirty and not allow_dirty:
        raise ConfigError(
            "[analysis]: the working tree has uncommitted changes; commit them (a pre-registered run "
            "records the commit it ran) or pass --allow-dirty (recorded, and shown in every report)"
        )
    record = read_record(experiment_dir)
    frozen = {(r.get("seed_set"), r.get("hash")) for r in record}
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    declared = {"confirmatory": section.seeds, "replication": section.replication_seeds}
    added = tuple(
        {
            "seed_set": name,
            "seeds": format_seeds(declared[name]),
            "plan": plan_label(plan_path),
            "hash": section.hash,
            "section": dict(section.raw),
            "commit": commit,
            "dirty": bool(dirty),
            "frozen_at": stamp,
        }  # fmt: skip
        for name in touched
        if (name, section.hash) not in frozen
    )
    if added:
        path = Path(experiment_dir) / RECORD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"freezes": [*record, *added]})
    short = section.hash[:12]
    said = ", ".join(f"{e['seed_set']} seeds {e['seeds']}" for e in added)
    if added:
        line = f"analysis {short} frozen for {said} at {commit[:12]}{' (dirty tree)' if dirty else ''}"
    else:
        line = f"analysis {short} already frozen for the {' and '.join(touched)} seeds"
    return Freeze(added, line + note)


def analysis_lines(section: AnalysisSection | None) -> list[str]:
    """A plan's ``[analysis]`` as ``repro show`` prints it (nothing without one)."""
    if section is None:
        return []
    again = section.replication_seeds
    sets = f"seeds {seeds_text(section.seeds)}"
    if again:
        sets += f", replication seeds {seeds_text(again)}{' (pooled with them)' if section.pool else ''}"
    lines = [
        f"analysis: {section.hash[:12]}, frozen by run before a seed set's first job: alpha "
        f"{section.alpha:g}, {section.correction} across {len(section.endpoints)} endpoints, {sets}"
    ]
    for e in section.endpoints:
        what = {"game": f"{e.candidate} - {e.baseline} on {e.game}",
                "aggregate": f"{e.metric} of {e.candidate} - {e.baseline}",
                "effect": f"main effect of {e.switch} on {e.game or 'the aggregate'}"}[e.kind]  # fmt: skip
        lines.append(f"  {e.name}: {what}; {e.test}, {e.sides}")
    return lines
