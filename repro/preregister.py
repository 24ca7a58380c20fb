"""A plan's analysis (``protocol.registration``), frozen in the experiment before the first job of a
seed set starts.

Why freeze: an analysis chosen after a look at the data (which seeds to pool, which test, which
games) makes its p-values and intervals mean less than they say (Simmons, Nelson & Simonsohn 2011,
"False-Positive Psychology", Psychological Science 22(11); Nosek et al. 2018, "The preregistration
revolution", PNAS 115(11)). ``freeze`` writes the section, its hash, the code's commit, the
fingerprint of the reading code (``protocol.freeze_check``) and the time into
``<experiment>/preregistration.json`` before the first job of a seed set runs, and refuses a tree
with uncommitted changes, or a plan whose section is not committed, unless ``--allow-dirty`` (then
recorded as dirty). The analysis layer (``analysis.preregistered``) checks the record
(``protocol.freeze_check``) and compares each run's own start time and commit with the freeze to
label every result pre-registered or exploratory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError
from algorithms.rundir import atomic_write_json, git_state
from protocol.freeze_check import code_fingerprint, committed_section_hash
from protocol.plan_args import format_seeds, seeds_text
from protocol.registration import RECORD_FILE, AnalysisSection, Endpoint, plan_label, read_record


@dataclass(frozen=True)
class Freeze:
    """What ``freeze`` did: the entries it added (none when every seed set it runs was frozen with
    this section already), and the line ``run`` prints."""

    added: tuple[dict[str, Any], ...]
    line: str


def check_freeze(
    section: AnalysisSection,
    seeds: Sequence[int],
    allow_dirty: bool,
    plan_path: Path,
    code_dir: Path | None = None,
) -> tuple[list[str], str | None, bool]:
    """What ``freeze`` checks before it writes anything, and ``run --dry-run`` with it: the declared
    seed sets that ``seeds`` touch and, when they touch one, the code's commit and whether the frozen
    inputs differ from it: tracked files with uncommitted changes, or a plan whose committed
    ``[analysis]`` is not ``section`` (``protocol.freeze_check`` anchors a clean freeze on it). A
    ``ConfigError`` without a commit (no git), or on either difference unless ``allow_dirty``."""
    touched = [s for s in ("confirmatory", "replication") if any(section.seed_set(x) == s for x in seeds)]
    if not touched:
        return touched, None, False
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
    uncommitted = committed_section_hash(plan_label(plan_path), commit) != section.hash
    if uncommitted and not allow_dirty:
        raise ConfigError(
            f"{plan_path} [analysis]: this section is not committed at {commit[:12]}; commit the plan "
            "(a freeze is checked against the commit it names) or pass --allow-dirty (recorded, and "
            "shown in every report)"
        )
    return touched, commit, bool(dirty) or uncommitted


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
    touched, commit, dirty = check_freeze(section, seeds, allow_dirty, plan_path, code_dir)
    outside = sorted(x for x in seeds if section.seed_set(x) is None)
    note = (
        f"; seeds {seeds_text(outside)} are in neither declared set: their results are exploratory"
        if outside
        else ""
    )
    if not touched:
        return Freeze((), f"analysis: no declared seed set in this run{note}")
    record = read_record(experiment_dir)
    frozen = {(r.get("seed_set"), r.get("hash")) for r in record}
    # microseconds: a run started within the second of the freeze is ordered against it exactly
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="microseconds")
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
            "analysis_code": code_fingerprint(),
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
    secondary = len(section.endpoints) - len(section.family)
    aside = f" (and {secondary} secondary, each alone)" if secondary else ""
    lines = [
        f"analysis: {section.hash[:12]}, frozen by run before a seed set's first job: alpha "
        f"{section.alpha:g}, {section.correction} across {len(section.family)} endpoints{aside}, {sets}"
    ]
    for e in section.endpoints:
        what = _endpoint_text(e)
        aside = " (secondary: outside the family)" if e.secondary else ""
        lines.append(f"  {e.name}: {what}; {e.test}, {e.sides}{aside}")
    return lines


def _endpoint_text(e: Endpoint) -> str:
    """What one endpoint compares, as ``show`` lists it."""
    if e.kind == "game":
        return f"{e.candidate} - {e.baseline} on {e.game}"
    if e.kind == "aggregate":
        return f"{e.metric} of {e.candidate} - {e.baseline}"
    if e.kind == "effect":
        return f"main effect of {e.switch} on {e.game or 'the aggregate'}"
    if e.kind == "change":
        return f"change of {e.candidate} - {e.baseline} on {e.game} from {e.steps_text}"
    reference = e.baseline or f"published {e.reference:g}"
    return f"{e.candidate} - {reference} on {e.game}, {e.score} return, margin {e.margin:g}"
