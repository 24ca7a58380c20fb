"""A freeze record checked on every read: a ``preregistration.json`` edited after its freeze is told
apart from one written by ``repro.preregister.freeze``, and the code that reads the runs is compared
with the code that was frozen.

Why: the record is a plain file beside the runs. Its own hash alone proves nothing (anyone who edits a
section can recompute it), so each freeze is anchored outside the file, in git:

* **Section.** The recorded section must hash to the recorded hash, and (a freeze from a clean tree)
  the plan file committed at the recorded commit must hold that same section: ``freeze`` refuses to
  freeze a section that is not committed unless ``--allow-dirty``, and then records the freeze as
  dirty, which is checked by its own hash only and says so in every label.
* **Time.** A freeze cannot precede its own commit: ``frozen_at`` at or after the commit's time.
* **History.** Where the record itself is tracked by git, every committed version of it must hold the
  same entries (later versions may only append).
* **Reading code.** ``freeze`` records the git blob id of every file of the reading code
  (``CODE_DIRS``); a read compares them with the files it runs, so a reading with changed analysis
  code is never the frozen reading. Records older than this field are compared with the frozen
  commit's tree instead.

A failed check is *altered*; a check that cannot be made (no git, a commit this clone lacks) leaves
the record *unverified*. Either way ``analysis.preregistered`` labels nothing pre-registered.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.rundir import git_output
from protocol.files import REPO_ROOT
from protocol.plan_args import format_seeds, parse_seeds
from protocol.registration import RECORD_FILE, plan_file, section_hash

# The code that turns runs into endpoint results: the analysis layer and the protocol it reads plans
# and records with, its modules and data tables. A change to any of these files makes a reading other
# than the frozen one; their prose (README.md) does not.
CODE_DIRS = ("analysis", "protocol")
PROSE = ".md"
SEED_SETS = ("confirmatory", "replication")
ENTRY_KEYS = {"seed_set": str, "seeds": str, "hash": str, "section": dict, "commit": str, "dirty": bool,
              "frozen_at": str}  # fmt: skip
# Committed versions of a record compared on each read (newest first): enough for any real history.
MAX_VERSIONS = 50


def blob_id(data: bytes) -> str:
    """git's id of a file's content (SHA-1 of ``blob <size>\\0`` and the bytes): a fingerprint taken
    from a working tree compares with ``git ls-tree`` of a commit without checking it out."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def code_fingerprint(root: Path = REPO_ROOT) -> dict[str, str]:
    """``{path: blob id}`` of every file under ``CODE_DIRS`` in ``root`` (bytecode caches left out)."""
    found = {}
    for name in CODE_DIRS:
        for path in sorted((root / name).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", PROSE):
                found[path.relative_to(root).as_posix()] = blob_id(path.read_bytes())
    return found


def committed_fingerprint(commit: str, root: Path = REPO_ROOT) -> dict[str, str] | None:
    """``code_fingerprint`` of ``commit``'s tree; None when ``root``'s repository lacks the commit."""
    listing = git_output(["ls-tree", "-r", commit, "--", *CODE_DIRS], root)
    if listing is None:
        return None
    found = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if not path.endswith(PROSE):
            found[path] = meta.split()[2]
    return found


def changed_files(frozen: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """Paths added, removed or edited between two fingerprints."""
    return sorted(p for p in set(frozen) | set(now) if frozen.get(p) != now.get(p))


def committed_section_hash(plan_label: str, commit: str) -> str | None:
    """The hash of the ``[analysis]`` table of the plan file as committed at ``commit``, in the
    repository that holds the plan; None when there is no such commit, file or table."""
    path = plan_file(plan_label)
    text = git_output(["show", f"{commit}:./{path.name}"], path.parent) if path.parent.is_dir() else None
    if text is None:
        return None
    try:
        analysis = tomllib.loads(text).get("analysis")
    except tomllib.TOMLDecodeError:
        return None
    return section_hash(analysis) if isinstance(analysis, Mapping) else None


def parse_time(text: Any) -> dt.datetime | None:
    """A record's or a run's ISO time; one without a zone is UTC (how the harness writes them); None
    when it is not a time."""
    try:
        stamp = dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class RecordCheck:
    """What the checks found (module doc): ``altered`` and ``unverified`` reasons, one line each, and
    per seed set the reading-code files changed since its freeze (None: the frozen code is unknown)."""

    altered: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    code_changed: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)

    @property
    def sound(self) -> bool:
        return not self.altered and not self.unverified


def _entry_problems(i: int, entry: Any) -> list[str]:
    """The shape of one entry: its keys and their types, a known seed set, seeds as its section
    declares them, a section that hashes to its hash, a readable time."""
    if not isinstance(entry, dict):
        return [f"entry {i + 1} is not a table"]
    wrong = [k for k, kind in ENTRY_KEYS.items() if not isinstance(entry.get(k), kind)]
    if wrong:
        return [f"entry {i + 1} lacks '{wrong[0]}' or it has the wrong type"]
    name = entry["seed_set"]
    if name not in SEED_SETS:
        return [f"entry {i + 1} names seed set {name!r}"]
    problems = []
    if section_hash(entry["section"]) != entry["hash"]:
        problems.append(
            f"the {name} freeze's section does not hash to its recorded hash {entry['hash'][:12]}"
        )
    key = "seeds" if name == "confirmatory" else "replication_seeds"
    try:
        declared = format_seeds(parse_seeds(str(entry["section"].get(key, "")), key))
    except ValueError:
        declared = None
    if declared != entry["seeds"]:
        problems.append(f"the {name} freeze's seeds {entry['seeds']!r} are not its section's {key}")
    if parse_time(entry["frozen_at"]) is None:
        problems.append(f"the {name} freeze's time {entry['frozen_at']!r} is not a time")
    return problems


def _anchor(entry: dict[str, Any], plan: str, root: Path) -> tuple[list[str], list[str]]:
    """``(altered, unverified)`` of one well-formed entry against git: its commit's time and, from a
    clean tree, the plan (``plan``, as freezes name it) and the reading code committed there."""
    name, commit = entry["seed_set"], entry["commit"]
    plan_dir = plan_file(plan).parent
    asks = [root, plan_dir] if plan_dir.is_dir() else [root]
    when = next(
        (t for d in asks if (t := git_output(["show", "-s", "--format=%cI", f"{commit}^{{commit}}"], d))),
        None,
    )
    if when is None:
        return [], [f"the {name} freeze's commit {commit[:12]} is not in this repository (a shallow clone?)"]
    altered = []
    if (made := parse_time(when)) is not None and parse_time(entry["frozen_at"]) < made:
        altered.append(f"the {name} freeze's time {entry['frozen_at']} precedes its commit's ({when})")
    if entry["dirty"]:
        return altered, []
    committed = committed_section_hash(plan, commit)
    if committed is None:
        return altered, [f"the {name} freeze's plan {plan} is not committed at {commit[:12]}"]
    if committed != entry["hash"]:
        altered.append(f"the {name} freeze's section is not the one committed at {commit[:12]} in {plan}")
    recorded = entry.get("analysis_code")
    if isinstance(recorded, dict) and (tree := committed_fingerprint(commit, root)) is not None:
        if changed_files(recorded, tree):
            altered.append(f"the {name} freeze's analysis-code fingerprint is not its commit's")
    return altered, []


def _history(experiment_dir: Path, record: list[Any]) -> list[str]:
    """Entries of ``record`` that differ from a committed version of the record (module doc)."""
    path = Path(experiment_dir) / RECORD_FILE
    commits = git_output(["log", f"-{MAX_VERSIONS}", "--format=%H", "--", RECORD_FILE], path.parent)
    for commit in (commits or "").split():
        text = git_output(["show", f"{commit}:./{RECORD_FILE}"], path.parent)
        try:
            old = json.loads(text or "")["freezes"]
        except (ValueError, KeyError, TypeError):
            continue
        if record[: len(old)] != old:
            return [f"{path} differs from its version committed at {commit[:12]}"]
    return []


def _code_changes(entry: dict[str, Any], now: dict[str, str], root: Path) -> tuple[str, ...] | None:
    recorded = entry.get("analysis_code")
    frozen = recorded if isinstance(recorded, dict) else committed_fingerprint(entry["commit"], root)
    return None if frozen is None else tuple(changed_files(frozen, now))


def check_record(experiment_dir: Path, record: list[Any], plan: str, root: Path = REPO_ROOT) -> RecordCheck:
    """Every check of the module doc on ``record`` (``read_record`` of ``experiment_dir``); ``plan``:
    the plan of a freeze that does not name its own (records written before freezes named it);
    ``root``: the checkout whose reading code runs now."""
    altered, unverified = [], []
    for i, entry in enumerate(record):
        problems = _entry_problems(i, entry)
        altered += problems
        if not problems:
            a, u = _anchor(entry, str(entry.get("plan") or plan), root)
            altered += a
            unverified += u
    altered += _history(experiment_dir, record)
    now = code_fingerprint(root)
    code: dict[str, tuple[str, ...] | None] = {}
    for e in record:  # the first freeze of each set: the one results use
        if isinstance(e, dict) and isinstance(e.get("commit"), str) and e.get("seed_set") not in code:
            code[str(e.get("seed_set"))] = _code_changes(e, now, root)
    return RecordCheck(tuple(altered), tuple(unverified), code)
