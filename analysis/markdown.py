"""Table cells and markdown tables, shared by the study's summary (``analysis.study``), the
factorial analysis (``analysis.factorial``) and the HTML report (``reports``)."""

from __future__ import annotations

import numpy as np


def fmt(value: object) -> str:
    """Display string of a table cell (reports and markdown alike): 4 significant digits for floats,
    thousands separators for big numbers, yes/no for booleans, '–' for missing values."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        value = float(value)
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        if abs(value) >= 1e4:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value)


def ci_text(value: float, lo: float, hi: float, scale: float = 1.0) -> str:
    """``value [lo, hi]``, each multiplied by ``scale`` and shown with ``fmt``; the value alone where
    there is no interval (both ends NaN: one run, or an estimate shown without one)."""
    if fmt(lo) == fmt(hi) == "–":
        return fmt(value * scale)
    return f"{fmt(value * scale)} [{fmt(lo * scale)}, {fmt(hi * scale)}]"


def md_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    cells = [[str(c).replace("|", "\\|") for c in row] for row in [columns, *rows]]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    return (
        [lines[0], "|" + "---|" * len(columns), *lines[1:]]
        if rows
        else [lines[0], "|" + "---|" * len(columns)]
    )
