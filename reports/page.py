"""The report page's parts (tables, figures, sections), its template and its figure files: what every
section builder of ``reports`` fills in, and how ``reports.build`` turns them into one page."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from algorithms.rundir import atomic_write_bytes, check_output
from analysis.markdown import fmt

REPORT_FILE = "report.html"
PNG_URI = "data:image/png;base64,"
URI_SUFFIXES = ((PNG_URI, ".png"), ("data:image/gif;base64,", ".gif"))


@dataclass
class Table:
    """A rendered table: ``id`` (for tests and anchors), header, rows of display strings; a ``folded``
    one is shown by its caption until the reader opens it (detail most readers skip)."""

    id: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    folded: bool = False


@dataclass
class Figure:
    id: str
    uri: str
    alt: str
    caption: str = ""


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    statements: list[str] = field(default_factory=list)  # the page's headline sentences, shown first
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def frame_table(
    table_id: str,
    frame: pd.DataFrame,
    columns: list[tuple[str, str]],
    caption: str = "",
    folded: bool = False,
) -> Table:
    rows = [[fmt(row[key]) for _, key in columns] for _, row in frame.iterrows()]
    return Table(table_id, [label for label, _ in columns], rows, caption, folded)


def write_figures(sections: list[Section], directory: Path) -> list[Path]:
    """Each figure of ``sections`` as ``directory/<figure id>.png`` (a clip: ``.gif``), the bytes the
    report embeds, for a results page in docs/ to link (a page of markdown cannot hold data URIs)."""
    files = {}
    for figure in (f for section in sections for f in section.figures):
        prefix, suffix = next(((p, s) for p, s in URI_SUFFIXES if figure.uri.startswith(p)), (None, None))
        if prefix is None:
            raise ValueError(f"figure {figure.id} is not an embedded PNG or GIF")
        path = directory / f"{figure.id}{suffix}"
        check_output(path)  # all before the first: a refused file leaves the directory as it was
        files[path] = base64.b64decode(figure.uri[len(prefix) :])
    directory.mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        atomic_write_bytes(path, data)
    return list(files)


def render(**context: Any) -> str:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("experiment.html.j2").render(**context)
