"""Append-only CSV tables (progress.csv, eval.csv): one fsynced write per batch of rows, a torn
last line (a crash while appending, a copy cut short) found by ``sound_length``, dropped by readers
and cut by writers, and rows cut back to a checkpoint without changing the bytes of those kept.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from algorithms.rundir.atomic import atomic_write_bytes
from algorithms.rundir.layout import check_regular, read_regular


class CsvTable:
    """An append-only CSV table whose columns are fixed by its header.

    Each row is written with one ``write`` call, flushed and fsynced, so a crash loses at most the
    row being written (a torn last line without its newline), which readers drop.
    """

    def __init__(self, path: Path, columns: Iterable[str] | None = None) -> None:
        self.path = Path(path)
        self.default_columns: list[str] | None = list(columns) if columns is not None else None
        self.columns = self.default_columns
        check_regular(self.path)  # appending to a FIFO would block until a reader came
        if self.path.exists() and self.path.stat().st_size > 0:
            self._repair_torn_tail()
            with self.path.open(newline="") as f:
                header = next(csv.reader(f), None)
            if header:
                self.columns = header

    def _repair_torn_tail(self) -> None:
        """Cut a torn last line (``sound_length``) left by a crash, so appends start on a fresh line."""
        data = self.path.read_bytes()
        cut = sound_length(data)
        if cut < len(data):
            with self.path.open("r+b") as f:
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())

    def append(self, row: dict[str, Any]) -> None:
        self.append_many([row])

    def append_many(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        new_file = self.columns is None or not self.path.exists() or self.path.stat().st_size == 0
        if self.columns is None:
            self.columns = list(rows[0])
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        if new_file:
            writer.writeheader()
        for row in rows:
            unknown = set(row) - set(self.columns)
            if unknown:
                raise KeyError(
                    f"{self.path}: row has columns {sorted(unknown)} not in the table header; "
                    "every progress row must log the same keys"
                )
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, column: str, max_value: float) -> int:
        """Drop rows whose ``column`` exceeds ``max_value`` (atomically); returns rows kept.

        A value that is not a number (a second header line a crashed writer left inside the table)
        is dropped with them. The rows kept keep their bytes: a table read back and written anew
        through pandas comes back formatted otherwise (floats with 15 significant digits instead of
        Python's shortest repr, a NaN logged as ``nan`` as an empty cell, an int of a column with
        NaNs as a float), so a resumed run's earlier rows would change (docs/results/run_integrity.md)."""
        if not self.path.exists():
            return 0
        table, _ = read_table(self.path)  # raises on a damaged table, as before any cut
        if table.empty:
            return 0
        values = pd.to_numeric(table[column], errors="coerce").to_numpy()
        keep = values <= max_value  # NaN compares False: dropped
        if keep.all():
            return len(table)
        data = self.path.read_bytes()
        lines = data[: sound_length(data)].splitlines(keepends=True)
        kept = [lines[0], *(line for line, k in zip(lines[1:], keep, strict=True) if k)]
        atomic_write_bytes(self.path, b"".join(kept))
        return int(keep.sum())

    def clear(self) -> int:
        """Remove the table (its header too: the next row starts it afresh); returns rows removed."""
        rows = 0
        if self.path.exists():
            rows = max(0, self.path.read_bytes().count(b"\n") - 1)  # lines after the header
            self.path.unlink()
        self.columns = self.default_columns
        return rows


def _csv_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return v


def _fields(line: bytes) -> int:
    return len(next(csv.reader([line.decode(errors="replace")]), []))


def sound_length(data: bytes) -> int:
    """Bytes of a table's text ``data`` before a torn last line: one without its newline (a crash
    while appending it), or, after a header and with a newline, with fewer fields than the header
    (the start of a row whose rest was lost: a copy or file cut short). ``len(data)`` when whole."""
    if data and not data.endswith(b"\n"):
        return data.rfind(b"\n") + 1
    lines = data.splitlines(keepends=True)
    if len(lines) >= 2 and _fields(lines[-1].rstrip(b"\r\n")) < _fields(lines[0].rstrip(b"\r\n")):
        return len(data) - len(lines[-1])
    return len(data)


def read_table(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """Read a CSV table, tolerating a torn last line (``sound_length``); returns (table, problems
    found). Raises ``ValueError`` (pandas' ``ParserError`` among them) when a row inside the table
    has another number of fields than the header: the table is damaged, not torn; and
    ``RunFileNotRegular`` (``read_regular``) when it is a FIFO, device or directory."""
    path = Path(path)
    problems: list[str] = []
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return pd.DataFrame(), [f"{path.name} missing"]
    cut = sound_length(data)
    if cut < len(data):
        data = data[:cut]
        problems.append(f"{path.name}: dropped a torn last line")
    if not data.strip():
        return pd.DataFrame(), problems
    lines = data.splitlines()
    width = _fields(lines[0])
    odd = next((i for i, line in enumerate(lines[1:], 2) if _fields(line) != width), None)
    if odd is not None:
        raise ValueError(f"line {odd} has {_fields(lines[odd - 1])} fields, the header {width}")
    table = pd.read_csv(io.BytesIO(data))  # raises pandas' ParserError on what else does not parse
    return table, problems


def schedule_gap(steps: Sequence[float], itrs: Sequence[float], interval: int) -> str | None:
    """Which row of a progress table is missing from the runner's schedule (``algorithms.runners.sync``:
    a row at the first batch end at or past the next multiple of ``interval`` after the last row, and
    one at the end of the budget), as a phrase; ``None`` when none is, or when the rows' env ``steps``
    and sampler iterations ``itrs`` (counted from the run's start) do not tell how many env steps a
    batch holds. The batch comes from the rows themselves (env steps per iteration between two rows,
    the largest seen), so a lost row is found without the runner's config: before a row at ``s``, the
    batch that ended at ``s - batch`` was already past the multiple due, and logged nothing."""
    points = list(zip([0.0, *steps], [0.0, *itrs]))
    if not steps or not all(math.isfinite(s) and math.isfinite(i) for s, i in points):
        return None
    batch = max(((s1 - s0) / (i1 - i0) for (s0, i0), (s1, i1) in zip(points, points[1:]) if i1 > i0),
                default=None)  # fmt: skip
    if batch is None:
        return None
    previous = 0
    for s in steps:
        due = (int(previous) // interval + 1) * interval
        if s - batch >= due:
            return f"lacks the row due at {due:,} env steps (it goes from {previous:,.0f} to {s:,.0f})"
        previous = s
    return None
