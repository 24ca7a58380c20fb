"""``show`` and ``diff``: a setting resolved with sources, and what differs between two settings.

A setting is named ``NAME`` or ``NAME@PROFILE`` (``r2d1_corrected@smoke``): the profile's budget
changes are applied, so ``diff r2d1_corrected r2d1_corrected@smoke`` lists exactly what the smoke
profile changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro.profiles import apply_profile, load_profile
from repro.settings import SETTINGS_DIR, Entry, Schema, Setting, default_schema, load_setting, with_defaults
from repro.tables import fmt, render


@dataclass(frozen=True)
class Resolved:
    label: str
    setting: Setting
    profile: str | None
    entries: dict[str, Entry]  # every field, defaults included


def resolve_label(label: str, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema) -> Resolved:
    name, _, profile_name = label.partition("@")
    setting = load_setting(name, settings_dir, schema)
    classes = schema(setting.algo)
    if profile_name:
        setting = apply_profile(setting, load_profile(profile_name), classes)
    return Resolved(label, setting, profile_name or None, with_defaults(setting, classes))


def show_text(resolved: Resolved) -> str:
    s = resolved.setting
    lines = [
        f"setting:  {s.name}  ({s.path})",
        f"title:    {s.title}",
        f"citation: {s.citation}",
        f"algo:     {s.algo}",
        f"base:     {s.base or '-'}",
        f"profile:  {resolved.profile or '- (as published)'}",
    ]
    if s.description:
        lines.append(f"about:    {s.description}")
    rows = [(key, fmt(e.value), e.origin, e.source) for key, e in resolved.entries.items()]
    lines += ["", render(["key", "value", "origin", "source"], rows)]
    return "\n".join(lines)


def diff_rows(a: Resolved, b: Resolved) -> list[tuple[str, Entry | None, Entry | None]]:
    """Keys whose values differ (a key missing on one side counts as different)."""
    out = []
    for key in list(a.entries) + [k for k in b.entries if k not in a.entries]:
        ea, eb = a.entries.get(key), b.entries.get(key)
        if ea is None or eb is None or ea.value != eb.value or type(ea.value) is not type(eb.value):
            out.append((key, ea, eb))
    return out


def diff_text(a: Resolved, b: Resolved) -> str:
    head = f"{a.label} ({a.setting.algo})  vs  {b.label} ({b.setting.algo})"
    rows = diff_rows(a, b)
    if not rows:
        return head + "\nno differences"

    def cell(e: Entry | None) -> tuple[str, str]:
        return ("(absent)", "") if e is None else (fmt(e.value), f"[{e.origin}] {e.source}")

    table = [(key, *cell(ea)[:1], *cell(eb)[:1], cell(ea)[1], cell(eb)[1]) for key, ea, eb in rows]
    header = ["key", a.label, b.label, f"source ({a.label})", f"source ({b.label})"]
    return f"{head}\n{len(rows)} differing keys\n\n" + render(header, table)
