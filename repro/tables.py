"""Plain-text tables for the terminal (show, diff, dry-run, throughput summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def setting_text(value: Any) -> str:
    """A config value as it is written in a TOML file (strings quoted, tuples as lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(setting_text(v) for v in value) + "]"
    if value is None:
        return "(none)"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:_}"
    return str(value)


def render(header: Sequence[str], rows: Sequence[Sequence[Any]], align_right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; ``align_right`` lists column indices to right-align."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        parts = [c.rjust(w) if i in align_right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def human_duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def human_count(n: float) -> str:
    n = float(n)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"
