"""Mirroring run directories from a node to the driver (the Ray backend's results: ``repro.ray_backend``).

The node side (``Mirror``) lists what changed in a directory since the last round: bytes appended
to a file (told from a file rewritten in place by the bytes kept before the end of what was sent),
whole files replaced or created (with their permission bits), files removed. The driver side
(``apply_changes``) makes its copy what the node's was when the round was read. Within a round
checkpoints are read before the tables and written after them, so the tables the driver holds
always reach at least the step of its checkpoint (a runner writes a row before the checkpoint of
that step; a resume cuts the tables back to it: ``algorithms.rundir.RunDir.recover``). Hidden names
(the run's lock file, temporary files of atomic writes in progress) are never copied.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from algorithms.rundir import CHECKPOINT_DIR, read_regular


def _is_checkpoint(rel: str) -> bool:
    """Whether ``rel`` is a file of a run directory's ``checkpoints/``."""
    return Path(rel).parent.name == CHECKPOINT_DIR


def _visible_files(root: Path) -> list[str]:
    """Files under ``root`` (a run directory, or a tree of them) as relative paths, checkpoints first
    (see the module docstring), without hidden names (the lock file, temporary files of atomic writes
    in progress)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith("."):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found, key=lambda rel: (not _is_checkpoint(rel), rel))


def read_dir(root: Path) -> dict[str, bytes]:
    """Every visible file under ``root`` (``{}`` when it does not exist); ``RunFileNotRegular`` for one
    that is a FIFO or device, never opened (``read_regular``)."""
    return {rel: read_regular(root / rel) for rel in _visible_files(root)} if root.is_dir() else {}


# Bytes kept before the end of what was sent, to tell an appended file from one rewritten in place.
_TAIL = 256


@dataclass
class _Sent:
    inode: int
    size: int
    mtime_ns: int
    tail: bytes


@dataclass
class Changes:
    """One sync round: ``files`` as ``(path, offset, bytes, mode)`` (offset 0: the whole file, with
    its permission bits, else the bytes appended at ``offset``), ``deleted`` paths, and the job's exit
    code once it has ended."""

    files: list[tuple[str, int, bytes, int]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    exit_code: int | None = None
    node: str | None = None  # the first message: where the attempt runs

    def __bool__(self) -> bool:
        return bool(self.files or self.deleted) or self.exit_code is not None or self.node is not None


class Mirror:
    """The node side: what changed in a directory since the last round, starting from what the
    driver already has."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sent: dict[str, _Sent] = {}

    def mark_sent(self) -> None:
        """Everything now under ``root`` is what the driver has (the seed it sent)."""
        for rel in _visible_files(self.root):
            with open(self.root / rel, "rb") as f:
                data = f.read()
                self._remember(rel, os.fstat(f.fileno()), data)

    def _remember(self, rel: str, st: os.stat_result, data: bytes) -> None:
        self.sent[rel] = _Sent(st.st_ino, len(data), st.st_mtime_ns, data[-_TAIL:])

    def changes(self) -> Changes:
        out = Changes()
        present = set()
        for rel in _visible_files(self.root):
            try:
                f = open(self.root / rel, "rb")
            except FileNotFoundError:  # removed since the listing
                continue
            with f:
                st = os.fstat(f.fileno())
                present.add(rel)
                old = self.sent.get(rel)
                if old and (st.st_ino, st.st_size, st.st_mtime_ns) == (old.inode, old.size, old.mtime_ns):
                    continue
                if old and st.st_ino == old.inode and st.st_size >= old.size:
                    start = max(0, old.size - len(old.tail))
                    f.seek(start)
                    head = f.read(old.size - start)
                    if head == old.tail:  # appended to: send the new bytes only
                        added = f.read()
                        if added:
                            out.files.append((rel, old.size, added, 0))
                        self._remember(rel, st, old.tail + added)
                        self.sent[rel].size = old.size + len(added)
                        continue
                    f.seek(0)
                data = f.read()
                out.files.append((rel, 0, data, stat.S_IMODE(st.st_mode)))
                self._remember(rel, st, data)
        for rel in set(self.sent) - present:
            out.deleted.append(rel)
            del self.sent[rel]
        return out


def apply_changes(run_dir: Path, changes: Changes) -> None:
    """The driver side: make ``run_dir`` what the node's copy was when ``changes`` was read.

    Checkpoints are written after the other files of the round, removals last, so the driver's
    tables never fall behind its checkpoint."""
    from algorithms.rundir import atomic_write_bytes

    ordered = sorted(changes.files, key=lambda c: _is_checkpoint(c[0]))
    for rel, offset, data, mode in ordered:
        path = run_dir / rel
        if offset == 0:
            atomic_write_bytes(path, data)
            path.chmod(mode)
        else:
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(data)
                f.truncate()
    for rel in changes.deleted:
        (run_dir / rel).unlink(missing_ok=True)
