"""Ablation plans (a plan with ``ablate``, ``repro.plans``): their arms, and a plan's arms as ``show``
lists them.

An ablation plan (``ablate``) has one arm, the base, and runs it beside the ``ablate`` setting and
one arm per deviation between the two: the base with that deviation's keys set to the ablate
setting's values, named ``<base>_with_<deviation>`` (``ablation_arms``). The deviations are the keys
``repro diff BASE ABLATE`` lists, grouped as the ablate setting's ``[[setting.deviations]]`` tables declare
(a key no group names is a deviation of its own); the values keep the ablate setting's sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.configs import ConfigError
from repro.plan_args import NAME, check_arm_name
from repro.settings import SETTINGS_DIR, Entry, Schema, Setting, default_schema, load_setting

if TYPE_CHECKING:
    from repro.plans import Plan

DEVIATION_INFIX = "_with_"


@dataclass(frozen=True)
class Arm:
    """One arm of a plan: its name (the run directory's), the setting it loads, and for an ablation
    arm the deviation switched on: ``(ablate setting, deviation name, keys)``."""

    name: str
    setting: str
    deviation: tuple[str, str, tuple[str, ...]] | None = None


def ablation_arms(
    plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema
) -> list[Arm]:
    """The arms of ``plan``: its settings, or for an ablation plan the ablate setting, the base and
    one arm per deviation (module doc), in the ablate setting's declared order, undeclared keys last.
    An ablate setting that declares no deviations, a declared key the algorithm lacks or one listed
    twice, or two settings with no difference is a ``ConfigError`` naming the plan and key."""
    if plan.ablate is None:
        return [Arm(Path(a).stem if a.endswith(".toml") else a, a) for a in plan.arms]
    from repro.inspect_settings import diff_rows, resolve_label

    where = f"{plan.path} [plan] 'ablate'"
    (base,) = plan.arms
    check_arm_name(plan.ablate, where)
    try:
        a, b = resolve_label(base, settings_dir, schema), resolve_label(plan.ablate, settings_dir, schema)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    if a.setting.algo != b.setting.algo:
        raise ConfigError(
            f"{where}: {plan.ablate!r} is algorithm {b.setting.algo!r}, "
            f"the base {base!r} is {a.setting.algo!r}"
        )
    declared = b.setting.deviations
    if not declared:
        raise ConfigError(
            f"{where}: setting {plan.ablate!r} declares no deviation switches ([[setting.deviations]] in "
            f"{b.setting.path})"
        )
    owner: dict[str, str] = {}
    order: list[str] = []
    for group in declared:
        name, keys = (group.get(k) if isinstance(group, Mapping) else None for k in ("name", "keys"))
        if (
            set(group if isinstance(group, Mapping) else ()) != {"name", "keys"}
            or not isinstance(name, str)
            or not NAME.match(name)
            or not isinstance(keys, list)
            or not keys
        ):
            raise ConfigError(
                f'{where}: {b.setting.path} [[setting.deviations]] {group!r}: expected name = "..." '
                'and keys = ["section.key", ...]'
            )
        for key in keys:
            if not isinstance(key, str) or key not in b.entries:
                raise ConfigError(
                    f"{where}: {b.setting.path} deviation {name!r} names {key!r}, a switch algorithm "
                    f"{b.setting.algo!r} lacks (keys are section.key of its settings)"
                )
            if key in owner:
                raise ConfigError(
                    f"{where}: {b.setting.path}: {key!r} is in deviations {owner[key]!r} and {name!r}"
                )
            owner[key] = name
            order.append(key)
    differing = [key for key, _, _ in diff_rows(a, b)]
    if not differing:
        raise ConfigError(f"{where}: {plan.ablate!r} and {base!r} do not differ: there is nothing to ablate")
    groups: dict[str, list[str]] = {}
    for key in order + differing:
        if key in differing:
            name = owner.get(key, key.replace(".", "_"))
            if key not in groups.get(name, []):
                groups.setdefault(name, []).append(key)
    base_name, ablate_name = a.setting.name, b.setting.name
    arms = [Arm(ablate_name, plan.ablate), Arm(base_name, base)]
    arms += [
        Arm(f"{base_name}{DEVIATION_INFIX}{name}", base, (plan.ablate, name, tuple(keys)))
        for name, keys in groups.items()
    ]
    return arms


def plan_lines(plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema) -> list[str]:
    """The plan's arms as ``show`` lists them: an ablation arm with the keys it takes from the ablate
    setting and their values."""
    lines = [f"plan:     {plan.name}  ({plan.path})", f"title:    {plan.title}"]
    if plan.ablate:
        lines.append(f"ablate:   {plan.ablate} against {plan.arms[0]}: one arm per deviation, both endpoints")
    lines += [f"envs:     {', '.join(plan.envs)}", f"seeds:    {plan.seeds or '(give --seeds)'}", "arms:"]
    ablate = load_setting(plan.ablate, settings_dir, schema) if plan.ablate else None
    for arm in ablation_arms(plan, settings_dir, schema):
        if arm.deviation is None or ablate is None:
            lines.append(f"  {arm.name}")
            continue
        values = ", ".join(
            f"{key}={_text(deviation_entry(ablate, key, schema).value)}" for key in arm.deviation[2]
        )
        lines.append(f"  {arm.name}: {values}")
    return lines


def _text(value: Any) -> str:
    return (
        str(value).lower()
        if isinstance(value, bool)
        else repr(value)
        if isinstance(value, str)
        else str(value)
    )


def deviation_entry(ablate: Setting, key: str, schema: Schema) -> Entry:
    """The ablate setting's entry of ``key``, or the dataclass default it leaves the key at."""
    from repro.settings import with_defaults

    return with_defaults(ablate, schema(ablate.algo))[key]
