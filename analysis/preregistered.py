"""The freeze record read back, and every result labelled pre-registered or exploratory.

A plan's ``[analysis]`` section (``protocol.registration``) is frozen in the experiment
(``preregistration.json``) before the first job of a seed set starts. Here it is read back
(``registration``: a ``Registration``) and every result labelled with it; the frozen endpoints are
tested in ``analysis.confirmatory``:

* **Labels** (``result_label``, the one labelling function of the study, the report and the markdown).
  A result is *pre-registered* only when it is a frozen endpoint read exactly as frozen (the same
  test, sides, correction and family of endpoints adjusted together), a section was frozen for its seed
  set, and every run it uses started after that freeze, from the frozen commit, from a clean tree (or
  one the freeze allowed dirty, which the label says). Every other reading of the same runs (a verdict,
  an aggregate, a per-game test, an effects table adjusted over another family) is *exploratory (not a
  frozen endpoint)*; a frozen endpoint's runs that fail the check are exploratory with the reason
  counted: no freeze, runs started before it, another commit, a dirty tree, seeds outside the frozen
  sets (seeds added after a look). Runs are checked from their own ``metadata.json`` (start time and
  commit of their first start). The record itself is checked first (``protocol.freeze_check``): a
  record edited after its freeze, or one that cannot be checked, makes nothing pre-registered, and a
  reading with analysis code other than the frozen code is exploratory.
* **Changes.** A section frozen again with another hash for the same seed set, or a plan file whose
  section no longer matches the freeze, is said on top of every summary and report: the analysis
  then uses the first freeze, and only the runs that started after it count as pre-registered.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from algorithms.configs import ConfigError
from analysis.runs import run_starts
from protocol.files import PLANS_DIR, read_toml
from protocol.freeze_check import RecordCheck, check_record, parse_time
from protocol.registration import (
    RECORD_FILE,
    AnalysisSection,
    Endpoint,
    parse_section,
    plan_file,
    plan_label,
    read_record,
    section_hash,
)

PRE = "pre-registered"
EXPLORATORY = "exploratory"
ALTERED = "freeze record altered"
UNVERIFIED = "freeze record unverified"


@dataclass(frozen=True)
class Registration:
    """What an experiment's ``preregistration.json`` says: the first freeze of each seed set, the
    section they froze (None without a freeze), the notes every summary shows on top, and what the
    record's checks found (``protocol.freeze_check``)."""

    freezes: dict[str, dict[str, Any]] = field(default_factory=dict)  # seed set -> its first freeze
    section: AnalysisSection | None = None
    notes: tuple[str, ...] = ()
    check: RecordCheck = field(default_factory=RecordCheck)
    statements: tuple[str, ...] = ()  # shown on top, in bold: a record altered, a section changed

    @property
    def frozen(self) -> bool:
        return self.section is not None

    @property
    def blocked(self) -> str | None:
        """Why nothing is pre-registered whatever the runs: the record fails its checks."""
        if self.check.altered:
            return f"{ALTERED}: {'; '.join(self.check.altered)}"
        if self.check.unverified:
            return f"{UNVERIFIED}: {'; '.join(self.check.unverified)}"
        return None

    def code_reason(self, seed_set: str) -> str | None:
        """Why the ``seed_set``'s endpoints are not read with the frozen code (None: they are)."""
        changed = self.check.code_changed.get(seed_set, ())
        if changed is None:
            return "the frozen analysis code is unknown here (its commit is not in this repository)"
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            return f"analysis code changed since the freeze ({shown})"
        return None

    def code_line(self) -> str:
        """How the reading code compares with the frozen code, for the top of a page."""
        entry = self.freezes.get("confirmatory") or next(iter(self.freezes.values()))
        reason = self.code_reason(str(entry.get("seed_set")))
        commit = str(entry.get("commit"))[:12]
        if reason is None:
            return (
                f"The analysis code reading these runs is the frozen code (commit {commit}): files identical."
            )
        return (
            f"The reading is not the frozen one: {reason}. Its endpoints are exploratory here; read them "
            f"as frozen with this command and --as-frozen, which runs it with the code of commit {commit} "
            f"(or by hand: git worktree add --detach ../frozen-{commit} {commit}, then this command from "
            "there)."
        )


def _plan_path(freeze: dict[str, Any], plan: dict[str, Any] | None) -> Path:
    """The plan file a freeze came from: the one it names, else (records written before freezes named
    it) the shipped plan of the experiment's plan record."""
    if freeze.get("plan"):
        return plan_file(str(freeze["plan"]))
    names = [p.get("plan") for p in (plan or {}).get("plans", []) if isinstance(p, dict)]
    return PLANS_DIR / f"{names[0]}.toml" if names else PLANS_DIR


def registration(exp_path: Path, metadata: pd.DataFrame, plan: dict[str, Any] | None = None) -> Registration:
    """The experiment's ``Registration`` (module doc); ``metadata``: its runs' metadata table; ``plan``:
    its plan record (plan.json), which names the plan file of a freeze that does not."""
    record = read_record(exp_path)
    if not record:
        return Registration()
    check = check_record(exp_path, record, plan_label(_plan_path({}, plan)))
    failed = [(ALTERED, a) for a in check.altered] or [(UNVERIFIED, u) for u in check.unverified]
    statements = [f"{what.capitalize()}: {why}; nothing here is pre-registered." for what, why in failed]
    entries = [e for e in record if isinstance(e, dict) and isinstance(e.get("section"), dict)]
    origin = next(
        (e for e in entries if e.get("seed_set") == "confirmatory"), entries[0] if entries else None
    )
    if origin is None:
        return Registration(statements=tuple(statements), check=check)
    try:
        section = parse_section(origin["section"], f"{exp_path / RECORD_FILE}", None, None, None)
    except ConfigError as e:
        statements.append(f"{ALTERED.capitalize()}: {e}; nothing here is pre-registered.")
        return Registration(statements=tuple(statements), check=RecordCheck((*check.altered, str(e))))
    first: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = entry.get("seed_set")
        if name not in first:
            first[name] = entry
        elif entry.get("hash") != first[name].get("hash"):
            started = _started_before(metadata, parse_time(entry.get("frozen_at")))
            statements.append(
                f"Changed after runs existed: the [analysis] section of the {name} seeds was frozen again "
                f"with a changed section ({str(entry.get('hash'))[:12]}, {entry.get('frozen_at')}) after "
                f"the first freeze ({str(first[name].get('hash'))[:12]}, {first[name].get('frozen_at')}), "
                f"when {started} run(s) had already started; results use the first freeze."
            )
    notes = _plan_notes(_plan_path(origin, plan), section)
    for name, entry in first.items():
        if entry.get("dirty"):
            notes.append(
                f"The {name} seeds were frozen from a tree with uncommitted changes or an uncommitted plan "
                f"(--allow-dirty) at {str(entry.get('commit'))[:12]}: their code is not exactly that "
                "commit, and the freeze is checked by its own hash only."
            )
    reg = Registration(first, section, tuple(notes), check)
    (statements if reg.code_reason(str(origin.get("seed_set"))) else notes).append(reg.code_line())
    return replace(reg, notes=tuple(notes), statements=tuple(statements))


def _plan_notes(plan_path: Path, section: AnalysisSection) -> list[str]:
    """What the plan file in this checkout says against the frozen section."""
    if not plan_path.is_file():
        return [f"The plan file {plan_path} is not here: whether its section changed since is unknown."]
    try:
        now = read_toml(plan_path).get("analysis")
    except ConfigError as e:
        return [f"The plan file {plan_path} cannot be read now ({e}); results use the frozen one."]
    if now is None or section_hash(now) != section.hash:
        return [
            f"The plan file {plan_path} no longer holds the frozen [analysis] section (frozen "
            f"{section.hash[:12]}, now {section_hash(now)[:12] if now else 'none'}); results use the "
            "frozen one."
        ]
    return []


def freeze_rows(reg: Registration, metadata: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The table of freezes a page shows: each seed set's freeze, whether the reading code is the
    frozen code, and when the reading was fixed against the set's first run."""
    header = ["seed set", "seeds", "section hash", "commit", "frozen at", "dirty tree", "reading code",
              "frozen vs first run"]  # fmt: skip
    rows = []
    for name, e in reg.freezes.items():
        reason = reg.code_reason(name)
        rows.append([
            name, str(e.get("seeds")), str(e.get("hash"))[:12], str(e.get("commit"))[:12],
            str(e.get("frozen_at")), "yes (--allow-dirty)" if e.get("dirty") else "no",
            "frozen code" if reason is None else reason,
            _first_run_text(reg, name, metadata, parse_time(e.get("frozen_at"))),
        ])  # fmt: skip
    return header, rows


def _first_run_text(reg: Registration, name: str, metadata: pd.DataFrame, frozen: dt.datetime | None) -> str:
    """When the ``name`` seeds' first run started, against their freeze: before any data, or not."""
    if metadata.empty or "start_time" not in metadata or frozen is None:
        return "no runs yet"
    starts = [
        s for seed, t in zip(metadata.seed, metadata.start_time)
        if reg.section.seed_set(int(seed)) == name and (s := parse_time(t)) is not None
    ]  # fmt: skip
    if not starts:
        return "no runs yet"
    first = min(starts)
    minutes = abs((first - frozen).total_seconds()) / 60
    if first >= frozen:
        return (
            f"frozen {minutes:.0f} min before the first run started ({first.isoformat(timespec='seconds')})"
        )
    before = sum(s < frozen for s in starts)
    return (
        f"frozen {minutes:.0f} min after the first run started; {before} of {len(starts)} runs started before"
    )


def _started_before(metadata: pd.DataFrame, when: dt.datetime | None) -> int:
    if when is None or metadata.empty or "start_time" not in metadata:
        return 0
    return sum(1 for t in metadata.start_time if (s := parse_time(t)) is not None and s < when)


def run_label(reg: Registration, runs: pd.DataFrame, metadata: pd.DataFrame) -> tuple[str, str]:
    """``(label, why)`` of a result that uses ``runs`` (``arm, env, seed``): pre-registered only when
    every run belongs to a frozen seed set and started after its freeze, from its commit, clean, and
    every later start it records (``run_starts``) was from that commit too."""
    if reg.blocked:
        return EXPLORATORY, reg.blocked
    if not reg.frozen:
        return EXPLORATORY, "no [analysis] section was frozen before these runs"
    if runs.empty:
        return EXPLORATORY, "no runs"
    meta = runs[["arm", "env", "seed"]].merge(metadata, on=["arm", "env", "seed"], how="left")
    counts: dict[str, int] = {}
    dirty_allowed = False
    sets = set()
    for row in meta.itertuples(index=False):
        name = reg.section.seed_set(int(row.seed))
        sets.add(name)
        entry = reg.freezes.get(name) if name else None
        later = run_starts(row)[1:]  # the starts after the first, which the run records
        if entry is None:
            reason = "seeds outside the frozen seed sets" if name is None else f"{name} seeds never frozen"
        elif (start := parse_time(getattr(row, "start_time", None))) is None:
            reason = "no recorded start time"
        elif start < parse_time(entry["frozen_at"]):
            reason = "started before the freeze"
        elif str(getattr(row, "git_commit", "")) != entry["commit"]:
            reason = "another commit than the frozen one"
        elif getattr(row, "git_dirty", False) is True and not entry.get("dirty"):
            reason = "a tree with uncommitted changes"
        elif any("git_commit" in s and s["git_commit"] != entry["commit"] for s in later):
            reason = "resumed from another commit than the frozen one"
        elif any(s.get("git_dirty") is True and not entry.get("dirty") for s in later):
            reason = "resumed from a tree with uncommitted changes"
        else:
            dirty_allowed |= bool(entry.get("dirty"))
            continue
        counts[reason] = counts.get(reason, 0) + 1
    if counts:
        why = "; ".join(f"{n} of {len(meta)} runs: {reason}" for reason, n in counts.items())
        return EXPLORATORY, why
    if code := next((r for name in sorted(sets) if (r := reg.code_reason(name))), None):
        return EXPLORATORY, code
    return PRE, "frozen before every run, same commit" + (", dirty tree allowed" if dirty_allowed else "")


NOT_AN_ENDPOINT = "not a frozen endpoint"


@dataclass(frozen=True)
class Reading:
    """How a result was read: the frozen endpoint it claims to be (``endpoint``; None: it reads none),
    with the test, sides, correction and family (the names of the endpoints adjusted together) it was
    read with. A verdict, an aggregate, a per-game test or an effects table read from the same runs is
    ``Reading()``: no endpoint."""

    endpoint: str | None = None
    test: str | None = None
    sides: str | None = None
    correction: str | None = None
    family: tuple[str, ...] = ()


def frozen_reading(section: AnalysisSection, endpoint: Endpoint) -> Reading:
    """How the freeze says ``endpoint`` is read: its test and sides, adjusted with the section's
    correction across its family, or alone (no correction) when it is secondary."""
    if endpoint.secondary:
        return Reading(endpoint.name, endpoint.test, endpoint.sides, "none", (endpoint.name,))
    return Reading(endpoint.name, endpoint.test, endpoint.sides, section.correction, section.family)


def result_label(
    reg: Registration, reading: Reading, runs: pd.DataFrame, metadata: pd.DataFrame
) -> tuple[str, str]:
    """``(label, why)`` of a result, the one labelling function of the study, the report and the
    markdown: *pre-registered* only when ``reading`` is a frozen endpoint read exactly as frozen (same
    test, sides, correction and family) and its ``runs`` pass ``run_label``; every other reading of
    the same runs is exploratory, ``why`` saying what differs ("not a frozen endpoint"). Nothing is
    pre-registered when the freeze record fails its checks (``Registration.blocked``)."""
    if reg.blocked:
        return EXPLORATORY, reg.blocked
    if not reg.frozen:
        return EXPLORATORY, "no [analysis] section was frozen before these runs"
    section = reg.section
    frozen = {e.name: e for e in section.endpoints}
    if reading.endpoint not in frozen:
        return EXPLORATORY, NOT_AN_ENDPOINT
    kept_reading = frozen_reading(section, frozen[reading.endpoint])
    asked = (reading.test, reading.sides, reading.correction, sorted(reading.family))
    kept = (kept_reading.test, kept_reading.sides, kept_reading.correction, sorted(kept_reading.family))
    differs = [what for what, a, b in zip(("test", "sides", "correction", "family"), asked, kept) if a != b]
    if differs:
        return EXPLORATORY, f"{NOT_AN_ENDPOINT} as read: another {', '.join(differs)} than the frozen one"
    return run_label(reg, runs, metadata)


def label_text(label: tuple[str, str]) -> str:
    """A label as pages show it: "pre-registered", or "exploratory (why)"."""
    return label[0] if label[0] == PRE else f"{label[0]} ({label[1]})"
