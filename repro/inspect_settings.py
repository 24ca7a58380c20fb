"""``show`` and ``diff``: a setting resolved with sources, and what differs between two settings.

A setting is named ``NAME`` or ``NAME@PROFILE`` (``r2d1_corrected@smoke``): the profile's budget
changes are applied, so ``diff r2d1_corrected r2d1_corrected@smoke`` lists exactly what the smoke
profile changes.

``show`` also prints the value in effect next to a stated one that another key overrides, as the
algorithm's Config declares it (an optional ``effective_values()`` method: R2D1's
``swap_priority_exponents`` runs ``priority_alpha`` with ``priority_beta``'s value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError
from algorithms.rundir import declared_effective_values
from protocol.files import SETTINGS_DIR
from repro.profiles import apply_profile, load_profile
from repro.settings import (
    Entry,
    Schema,
    Setting,
    build_sections,
    command_line_entries,
    default_schema,
    load_setting,
    override,
    parse_overrides,
    with_defaults,
)
from repro.tables import render, setting_text

IN_EFFECT_MARK = "(*)"  # marks a stated value another key overrides, explained under the table


@dataclass(frozen=True)
class Resolved:
    label: str
    setting: Setting
    profile: str | None
    entries: dict[str, Entry]  # every field, defaults included
    # "algo.<field>" -> {"value": in effect, "reason": why}, as the algorithm's Config declares them
    effective: dict[str, dict[str, Any]]


def resolve_label(
    label: str, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema, sets: Sequence[str] = ()
) -> Resolved:
    """Setting ``NAME[@PROFILE]`` resolved, with ``--set`` texts ``sets`` applied after the profile (as
    ``run`` applies them; one value per key here, a sweep is ``run``'s)."""
    name, _, profile_name = label.partition("@")
    setting = load_setting(name, settings_dir, schema)
    classes = schema(setting.algo)
    if profile_name:
        setting = apply_profile(setting, load_profile(profile_name), classes)
    overrides = parse_overrides(sets)
    for key, values in overrides.items():
        if len(values) > 1:
            texts = ",".join(t for t, _ in values)
            raise ConfigError(f"--set {key}={texts}: one value per key here (run sweeps)")
    if overrides:
        setting = override(setting, command_line_entries({k: v[0] for k, v in overrides.items()}), classes)
        label += "".join(f" --set {key}={values[0][0]}" for key, values in overrides.items())
    effective = declared_effective_values("algo", build_sections(setting, classes)["algo"])
    return Resolved(label, setting, profile_name or None, with_defaults(setting, classes), effective)


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
    unused = _unused_env_keys(resolved.entries)
    rows = [
        (key, _value_cell(key, e, resolved), e.origin, e.source)
        for key, e in resolved.entries.items()
        if key not in unused
    ]
    lines += ["", render(["key", "value", "origin", "source"], rows)]
    if unused:
        kind = resolved.entries["env.kind"].value
        lines += ["", f"not shown, unused by a {kind!r} env (defaults it never reads): {', '.join(unused)}"]
    if resolved.effective:
        lines += ["", f"{IN_EFFECT_MARK} in effect: set by another key, not the value stated"]
        lines += [
            f"  {key} = {setting_text(e['value'])}: {e['reason']}" for key, e in resolved.effective.items()
        ]
    return "\n".join(lines)


def _unused_env_keys(entries: dict[str, Entry]) -> list[str]:
    """The ``env.*`` keys the setting's env kind never reads (``applicable_fields``: a gymnasium id
    has no Atari frame keys, a MinAtar game only its own)."""
    from algorithms.envs.config import EnvConfig, applicable_fields

    env = {key.split(".", 1)[1]: e.value for key, e in entries.items() if key.startswith("env.")}
    used = applicable_fields(EnvConfig(**env))
    return [f"env.{name}" for name in env if name not in used]


def _value_cell(key: str, entry: Entry, resolved: Resolved) -> str:
    """The stated value, followed by the value in effect where another key overrides it."""
    if key not in resolved.effective:
        return setting_text(entry.value)
    effective = setting_text(resolved.effective[key]["value"])
    return f"{setting_text(entry.value)} -> {effective} in effect {IN_EFFECT_MARK}"


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
        return ("(absent)", "") if e is None else (setting_text(e.value), f"[{e.origin}] {e.source}")

    table = [(key, *cell(ea)[:1], *cell(eb)[:1], cell(ea)[1], cell(eb)[1]) for key, ea, eb in rows]
    header = ["key", a.label, b.label, f"source ({a.label})", f"source ({b.label})"]
    return f"{head}\n{len(rows)} differing keys\n\n" + render(header, table)
