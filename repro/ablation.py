"""Ablation plans (a plan with ``ablate``, ``repro.plans``): their arms, and a plan's arms as ``show``
lists them.

An ablation plan (``ablate``) has one arm, the base, and runs it beside the ``ablate`` setting and
one arm per deviation between the two: the base with that deviation's keys set to the ablate
setting's values, named ``<base>_with_<deviation>`` (``ablation_arms``). The deviations are the keys
``repro diff BASE ABLATE`` lists, grouped as the ablate setting's ``[[setting.deviations]]`` tables declare
(a key no group names is a deviation of its own); the values keep the ablate setting's sources.

A designed ablation (``design`` beside ``ablate``) runs the same deviations as the switches of a
two-level factorial design (``protocol.design``): one arm per design row, the base with the row's
switches on, so that every run informs every switch's main effect (``analysis.factorial``) where a
leave-one-out arm informs one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.configs import ConfigError
from protocol.design import Design, check_design, standard_generators
from protocol.files import SETTINGS_DIR
from protocol.plan_args import DEVIATION_INFIX, NAME, check_arm_name
from repro.plan_file import PEER_NOTE
from repro.settings import Entry, Schema, Setting, default_schema, load_setting

if TYPE_CHECKING:
    from repro.plan_file import Plan

DESIGN_INFIX = "_on_"


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
    one arm per deviation (module doc), in the ablate setting's declared order, undeclared keys last;
    for a designed ablation (``design``) the arms of ``design_arms``."""
    if plan.ablate is None:
        return [Arm(Path(a).stem if a.endswith(".toml") else a, a) for a in plan.arms]
    base_name, ablate_name, groups = deviation_groups(plan, settings_dir, schema)
    if plan.design is not None:
        return design_arms(plan, plan_design(plan, groups), groups, base_name, ablate_name)
    (base,) = plan.arms
    arms = [Arm(ablate_name, plan.ablate), Arm(base_name, base)]
    arms += [
        Arm(f"{base_name}{DEVIATION_INFIX}{name}", base, (plan.ablate, name, tuple(keys)))
        for name, keys in groups.items()
    ]
    return arms


def deviation_groups(
    plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema
) -> tuple[str, str, dict[str, list[str]]]:
    """``(base name, ablate name, {deviation: keys})`` of an ablation plan: the keys ``repro diff``
    finds between its base and ablate settings, grouped as declared (module doc). An ablate setting
    that declares no deviations, a declared key the algorithm lacks or one listed twice, or two
    settings with no difference is a ``ConfigError`` naming the plan and key."""
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
    return a.setting.name, b.setting.name, groups


def plan_design(plan: Plan, groups: Mapping[str, Sequence[str]]) -> Design:
    """The checked ``Design`` of a designed ablation plan over its deviation ``groups`` (the switches,
    lettered in their order): ``ConfigError`` naming the plan's key when it cannot be run
    (``protocol.design.check_design``)."""
    switches = tuple(groups)
    if plan.design == "factorial":
        return check_design(Design("factorial", switches), f"{plan.path} [plan] 'design'")
    if plan.generators:
        where = f"{plan.path} [plan] 'generators'"
        return check_design(Design("fractional", switches, plan.generators), where, plan.resolution)
    where = f"{plan.path} [plan] 'resolution'"
    return check_design(
        Design("fractional", switches, standard_generators(len(switches), plan.resolution, where)), where
    )


def design_arms(
    plan: Plan, design: Design, groups: Mapping[str, Sequence[str]], base_name: str, ablate_name: str
) -> list[Arm]:
    """One arm per design row, in the design's standard order: the base with the switches of the row
    on (their keys at the ablate setting's values), named ``<base>_on_<letters>`` (``Design.
    arm_letters``). The endpoints keep their own names and settings: all off is the base arm, all on
    the ablate setting's, which sets every differing key to the same values; so their runs are the
    same runs a two-arm or leave-one-out plan of the two settings makes, and the endpoint verdict
    (``analysis.ablation.verdict_arms``) compares them as it does there."""
    (base,) = plan.arms
    arms = []
    for row in design.matrix:
        letters = design.arm_letters(row)
        if not letters:
            arms.append(Arm(base_name, base))
        elif len(letters) == len(design.letters):
            arms.append(Arm(ablate_name, plan.ablate))
        else:
            keys = tuple(k for name, x in zip(groups, row) if x > 0 for k in groups[name])
            arms.append(Arm(f"{base_name}{DESIGN_INFIX}{letters}", base, (plan.ablate, letters, keys)))
    return arms


def design_record(plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema) -> dict:
    """What analysis needs of a designed ablation (``analysis.factorial``), for the plan record: the
    design's kind and generators, each switch's letter, name and keys, and each arm's +/-1 row."""
    base_name, ablate_name, groups = deviation_groups(plan, settings_dir, schema)
    design = plan_design(plan, groups)
    arms = design_arms(plan, design, groups, base_name, ablate_name)
    return {
        "kind": design.kind,
        "generators": list(design.generators),
        "switches": [
            {"letter": c, "name": name, "keys": list(groups[name])} for c, name in zip(design.letters, groups)
        ],
        "arms": {arm.name: [int(x) for x in row] for arm, row in zip(arms, design.matrix)},
    }


def plan_lines(plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema) -> list[str]:
    """The plan's arms as ``show`` lists them: an ablation arm with the keys it takes from the ablate
    setting and their values; a designed ablation's switches, design matrix and aliases
    (``design_lines``)."""
    lines = [f"plan:     {plan.name}  ({plan.path})", f"title:    {plan.title}"]
    if plan.ablate and plan.design:
        lines.append(f"ablate:   {plan.ablate} against {plan.arms[0]}: a designed ablation (design below)")
    elif plan.ablate:
        lines.append(f"ablate:   {plan.ablate} against {plan.arms[0]}: one arm per deviation, both endpoints")
    lines += [f"envs:     {', '.join(plan.envs)}", f"seeds:    {plan.seeds or '(give --seeds)'}"]
    ablate = load_setting(plan.ablate, settings_dir, schema) if plan.ablate else None
    if plan.design is not None and ablate is not None:
        return lines + design_lines(plan, ablate, settings_dir, schema)
    lines.append("arms:")
    for arm in ablation_arms(plan, settings_dir, schema):
        if arm.deviation is None or ablate is None:
            lines.append(f"  {arm.name}")
            continue
        lines.append(f"  {arm.name}: {_values(ablate, arm.deviation[2], schema)}")
    lines += [f"  {peer}: {PEER_NOTE}" for peer in plan.peers]
    return lines


def _values(ablate: Setting, keys: Sequence[str], schema: Schema) -> str:
    return ", ".join(f"{key}={_text(deviation_entry(ablate, key, schema).value)}" for key in keys)


ROMAN = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII"}


def design_lines(
    plan: Plan, ablate: Setting, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema
) -> list[str]:
    """``show``'s account of a designed ablation: each switch's letter and values, the design matrix
    (+ on, - off; one row per arm), the defining relation, and the alias groups of main effects and
    two-factor interactions (effects that share a column are estimated as their sum)."""
    base_name, ablate_name, groups = deviation_groups(plan, settings_dir, schema)
    design = plan_design(plan, groups)
    arms = design_arms(plan, design, groups, base_name, ablate_name)
    k, p = len(design.letters), len(design.generators)
    if design.generators:
        r = ROMAN.get(design.resolution, design.resolution)
        what = f"a 2^({k}-{p}) fraction, resolution {r}, generators {', '.join(design.generators)}"
    else:
        what = f"the full 2^{k} factorial"
    lines = [f"design:   {what}: {len(arms)} arms"]
    lines.append("switches (- off: the base's values, + on: the ablate setting's):")
    lines += [
        f"  {c}  {name}: {_values(ablate, groups[name], schema)}" for c, name in zip(design.letters, groups)
    ]
    width = max(len(a.name) for a in arms)
    lines += ["design matrix:", f"  {'arm':<{width}}  {' '.join(design.letters)}"]
    lines += [
        f"  {arm.name:<{width}}  {' '.join('+' if x > 0 else '-' for x in row)}"
        for arm, row in zip(arms, design.matrix)
    ]
    if not design.words:
        return lines + ["aliases:  none (every effect has a column of its own)"]
    lines += [f"defining relation: I = {' = '.join(design.words)}", "aliases (effects sharing a column):"]
    # Every fraction holding both endpoints has resolution IV or more (protocol/design.py).
    lines.append(f"  main effects {', '.join(design.letters)}: each clear of two-factor interactions")
    pairs = [g for g in design.alias_groups if len(g[0]) == 2]
    lines += [f"  {' = '.join(g)}" for g in pairs if len(g) > 1]
    clear = [g[0] for g in pairs if len(g) == 1]
    return lines + ([f"  clear two-factor interactions: {', '.join(clear)}"] if clear else [])


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
