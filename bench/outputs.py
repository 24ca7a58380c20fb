"""What every bench writes: its rows as a CSV file (``--out``) and a Markdown summary beside it
(``.md``), each whole or not at all, and the check, before any measurement, that both may be
written there (``algorithms.rundir.check_output``)."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from algorithms.rundir import NotARegularFile, atomic_write_bytes, check_output


def check_outputs(out: Path) -> None:
    """Refuse, before any measurement, an ``--out`` (or the summary beside it, ``.md``) that is not a
    regular file or a new path (``check_output``): one line, exit 2."""
    for path in (out, out.with_suffix(".md")):
        try:
            check_output(path)
        except NotARegularFile as e:
            print(f"error: --out: {e}", file=sys.stderr)
            raise SystemExit(2) from None


def write_rows(out: Path, rows: Sequence[Mapping[str, Any]], fieldnames: Sequence[str]) -> None:
    """``rows`` as the CSV file ``out`` (its folder created), written whole or not at all."""
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(out, text.getvalue().encode())


def write_summary(out: Path, summary: str) -> None:
    """The Markdown ``summary`` next to the CSV file ``out``, and on the console."""
    atomic_write_bytes(out.with_suffix(".md"), summary.encode())
    print(summary)
