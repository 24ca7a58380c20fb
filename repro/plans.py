"""Experiment plans: arms x environments x seeds, expanded into jobs.

A plan (``repro/configs/plans/<name>.toml``)::

    [plan]
    title = "..."
    arms = ["rlpyt_r2d1_published", "r2d1_corrected"]     # setting names (or paths to .toml files)
    envs = ["pong", "seaquest"]                            # env ids (EnvConfig.id)
    envs_source = "where the env list comes from"

    seeds = "100-104"                                      # optional: the default of --seeds
    ablate = "rlpyt_r2d1_published"                        # optional: leave-one-out arms (below)
    pilot = "docs/results/r2d1_minatar.csv"                # optional: plan the seeds (repro/power.py)

An ablation plan (``ablate``) has one arm, the base, and runs it beside the ``ablate`` setting and
one arm per deviation between the two: the base with that deviation's keys set to the ablate
setting's values, named ``<base>_with_<deviation>`` (``ablation_arms``). The deviations are the keys
``repro diff BASE ABLATE`` lists, grouped as the ablate setting's ``[[setting.deviations]]`` tables declare
(a key no group names is a deviation of its own); the values keep the ablate setting's sources.

Each job is one (arm, env, seed) with its fully resolved ``TrainConfig`` (setting, then profile, then
the command line's ``--set`` values, then the plan's env id and seed), and its run directory
``<root>/<experiment>/<arm>/<env>/seed<k>`` (docs/ARCHITECTURE.md, Contract 5). A setting runs
without a plan file too (``setting_plan``: one arm, the envs given or the setting's own ``env.id``).
``--set section.key=a,b,c`` makes a sweep: one arm per value (per combination for several keys),
named by its values (``sweep_points``). Everything is validated while expanding, before any
directory is created: an unknown arm, game, profile, key or a bad seed spec is a ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError, unknown_key_message
from algorithms.rundir import run_path
from repro.extras import check_extras
from repro.profiles import REPO_ROOT, Profile, apply_profile, is_budget_key, load_profile
from repro.settings import (
    CONFIG_DIR,
    SET_OPTION,
    SETTINGS_DIR,
    Entry,
    Overrides,
    Schema,
    Setting,
    command_line_entries,
    default_schema,
    load_setting,
    override,
    read_toml,
    train_config,
)

PLANS_DIR = CONFIG_DIR / "plans"
PLAN_KEYS = {
    "title": str, "description": str, "arms": list, "envs": list, "envs_source": str, "seeds": str | int,
    "ablate": str, "pilot": str,
}  # fmt: skip
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
# Seeds per (arm, env): rliable's own studies use up to 100 runs per task (Agarwal et al. 2021); a
# thousand is far past any study, and more is a typo that would plan (and record) a huge grid.
MAX_SEEDS = 1000


@dataclass(frozen=True)
class Plan:
    name: str
    path: Path
    title: str
    description: str
    arms: tuple[str, ...]
    envs: tuple[str, ...]
    envs_source: str
    seeds: str | None = None  # the plan's seed spec (``parse_seeds``), the default of ``--seeds``
    setting: str | None = None  # a setting run without a plan file (``setting_plan``): its name or path
    ablate: str | None = None  # the setting whose deviations from the one arm make leave-one-out arms
    pilot: str | None = None  # tidy results the seed planner (repro/power.py) reads, relative to the repo


@dataclass(frozen=True)
class Arm:
    """One arm of a plan: its name (the run directory's), the setting it loads, and for an ablation
    arm the deviation switched on: ``(ablate setting, deviation name, keys)``."""

    name: str
    setting: str
    deviation: tuple[str, str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class Job:
    """One run of the plan. ``config`` is the resolved ``algorithms.train.TrainConfig``."""

    experiment: str
    arm: str  # the arm's name in the run directory: the setting's name
    setting: str  # how to load it: a shipped setting's name or a path to a .toml file
    env: str
    seed: int
    profile: str
    profile_path: Path
    run_dir: Path
    config: Any
    # ``--set`` values of this job's arm, ``(key, text)`` as given: the job's command line repeats them
    overrides: tuple[tuple[str, str], ...] = ()
    deviation: tuple[str, str, tuple[str, ...]] | None = None  # ``Arm.deviation`` of an ablation arm

    @property
    def key(self) -> str:
        return f"{self.arm}/{self.env}/seed{self.seed}"

    @property
    def n_steps(self) -> int:
        return self.config.runner.n_steps

    @property
    def frames(self) -> int:
        return self.n_steps * self.config.env.env_frameskip


def available_plans(plans_dir: Path = PLANS_DIR) -> list[str]:
    return sorted(p.stem for p in Path(plans_dir).glob("*.toml"))


def load_plan(name: str, plans_dir: Path = PLANS_DIR) -> Plan:
    path = Path(name) if name.endswith(".toml") else Path(plans_dir) / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"unknown plan '{name}'; " + unknown_key_message(name, available_plans(plans_dir)))
    data = read_toml(path)
    meta = data.get("plan")
    if set(data) != {"plan"} or not isinstance(meta, Mapping):
        raise ConfigError(f"{path}: a plan file has exactly one table, [plan]")
    for key, value in meta.items():
        if key not in PLAN_KEYS:
            raise ConfigError(
                f"{path} [plan]: unknown key '{key}'; " + unknown_key_message(key, list(PLAN_KEYS))
            )
        if not isinstance(value, PLAN_KEYS[key]) or isinstance(value, bool):
            expected = 'a seed spec (3, "100-104" or "1,5,9")' if key == "seeds" else PLAN_KEYS[key].__name__
            raise ConfigError(f"{path} [plan] '{key}': expected {expected}, got {type(value).__name__}")
    for key in ("title", "arms", "envs", "envs_source"):
        if key not in meta:
            raise ConfigError(f"{path} [plan]: missing required key '{key}'")
    for key in ("arms", "envs"):
        if not meta[key] or not all(isinstance(v, str) for v in meta[key]):
            raise ConfigError(f"{path} [plan] '{key}': expected a non-empty list of strings")
    for env in meta["envs"]:
        if not _NAME.match(env):
            raise ConfigError(f"{path} [plan] 'envs': {env!r} is not a valid name (it names a directory)")
    for arm in meta["arms"]:
        check_arm_name(arm, f"{path} [plan] 'arms'")
    if "ablate" in meta and len(meta["arms"]) != 1:
        raise ConfigError(
            f"{path} [plan] 'arms': an ablation plan (ablate = {meta['ablate']!r}) has one arm, the base "
            f"its deviations are switched on in, got {len(meta['arms'])}"
        )
    seeds = None
    if "seeds" in meta:
        seeds = str(meta["seeds"])
        parse_seeds(seeds, f"{path} [plan] 'seeds'")
    return Plan(
        path.stem, path, meta["title"], meta.get("description", ""), tuple(meta["arms"]), tuple(meta["envs"]),
        meta["envs_source"], seeds, ablate=meta.get("ablate"),
        pilot=str(REPO_ROOT / meta["pilot"]) if "pilot" in meta else None,
    )  # fmt: skip


def is_plan(name_or_path: str, plans_dir: Path = PLANS_DIR) -> bool:
    """Whether ``run``'s first argument names a plan (a shipped plan, or a ``.toml`` file with a
    ``[plan]`` table) rather than a setting."""
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
        return path.is_file() and "plan" in read_toml(path)
    return (Path(plans_dir) / f"{name_or_path}.toml").is_file()


def setting_plan(
    name_or_path: str,
    envs: Sequence[str] | None,
    settings_dir: Path = SETTINGS_DIR,
    schema: Schema = default_schema,
) -> Plan:
    """The one-arm plan of a setting run without a plan file (``python -m repro run ppo_cartpole``):
    on ``envs`` (``--env``), else on the setting's own ``env.id``. Named after the setting."""
    setting = load_setting(name_or_path, settings_dir, schema)
    check_arm_name(name_or_path, "run")
    if envs:
        source = "--env on the command line"
    else:
        entry = setting.entries.get("env.id")
        if entry is None:
            raise ConfigError(
                f"setting '{setting.name}' gives no env.id: name the env with --env ID (--env CartPole-v1)"
            )
        envs, source = (str(entry.value),), f"the setting's env.id ({entry.source})"
    return Plan(
        setting.name, setting.path, f"setting {setting.name}: {setting.title}", setting.description,
        (name_or_path,), tuple(envs), source, setting=name_or_path,
    )  # fmt: skip


def check_arm_name(arm: str, where: str) -> None:
    """An arm is a setting's name or a path to its ``.toml`` file; the name (the file's stem) names
    the arm's directory, so it must be a plain name: ``...toml`` would make the arm ``..``."""
    name = Path(arm).stem if arm.endswith(".toml") else arm
    if not _NAME.match(name):
        raise ConfigError(
            f"{where}: {arm!r} gives the arm name {name!r}, which is not a valid directory name"
        )


def parse_list(text: str | Sequence[str] | None, what: str, paths: bool = False) -> tuple[str, ...] | None:
    """``"pong, qbert"`` (or the values of a repeated option) -> ``("pong", "qbert")``; empty or None
    -> None (use the plan's own). ``paths``: an item may also be a path to a ``.toml`` file (arms)."""
    if text is None:
        return None
    texts = [text] if isinstance(text, str) else list(text)
    items = tuple(t.strip() for part in texts for t in part.split(",") if t.strip())
    if not items:
        return None
    for item in items:
        if paths and item.endswith(".toml"):
            check_arm_name(item, what)
        elif not _NAME.match(item):
            raise ConfigError(f"{what}: {item!r} is not a valid name")
    if len(set(items)) != len(items):
        raise ConfigError(f"{what}: duplicate entries in {', '.join(texts)!r}")
    return items


_COUNT = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(\d+)-(\d+)$")


def parse_seeds(spec: Any, what: str = "--seeds") -> tuple[int, ...]:
    """The seeds of a seed spec, the one reading of ``--seeds``, ``SEEDS`` and a plan's ``seeds``:
    ``3`` (a count: seeds 0, 1, 2), ``100-104`` (a range, both ends included) or ``1,5,9`` (a list of
    seeds and ranges); a sequence of seeds is checked as such. A spec that is none of these, a range
    that goes down, a repeated seed or more than ``MAX_SEEDS`` seeds is a ``ConfigError`` of one line
    naming ``what`` and the spec."""
    if isinstance(spec, tuple | list):  # seeds already read
        spec = format_seeds(list(spec)) if spec else ""
    text = str(spec).strip()

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{what} {text!r}: {why}")

    if _COUNT.match(text) and not isinstance(spec, bool):
        count = int(text)
        if count < 1:
            raise bad("a count of seeds must be at least 1")
        if count > MAX_SEEDS:
            raise bad(f"{count} seeds; at most {MAX_SEEDS}")
        return tuple(range(count))
    seeds: list[int] = []
    for item in text.split(","):
        item = item.strip()
        found = _RANGE.match(item)
        if found:
            first, last = int(found.group(1)), int(found.group(2))
            if last < first:
                raise bad(f"the range {item} goes down (write {last}-{first})")
            if last - first + 1 + len(seeds) > MAX_SEEDS:
                raise bad(f"more than {MAX_SEEDS} seeds")
            seeds.extend(range(first, last + 1))
        elif _COUNT.match(item) and "," in text:
            seeds.append(int(item))
        else:
            raise bad(
                f"{item!r} is not a seed; give a count (3: seeds 0..2), a range (100-104) or a list (1,5,9)"
            )
    if len(seeds) > MAX_SEEDS:
        raise bad(f"{len(seeds)} seeds; at most {MAX_SEEDS}")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise bad(f"seed {repeated[0]} is listed twice")
    return tuple(seeds)


Point = dict[str, tuple[str, Any]]  # one value per ``--set`` key: "section.key" -> (text, value)


def sweep_points(overrides: Overrides | None) -> list[tuple[str, Point]]:
    """``(arm suffix, point)`` per combination of the ``--set`` values (``settings.parse_overrides``):
    one point without overrides (suffix ""), else the Cartesian product in the order given. The suffix
    names the arm by its values (``_learning_rate-1e-4``): runs of other values never share a run
    directory. A sweep over a budget key (``repro.profiles.is_budget_key``) is refused: arms compared
    in one report must have had the same budget."""
    if not overrides:
        return [("", {})]
    for key, values in overrides.items():
        if len(values) > 1 and is_budget_key(key):
            texts = ",".join(text for text, _ in values)
            raise ConfigError(
                f"{SET_OPTION} {key}={texts}: a sweep over a budget key is refused (arms compared in one "
                "report need the same budget); run one value per experiment with --exp"
            )
    fields = [key.partition(".")[2] for key in overrides]
    names = [f if fields.count(f) == 1 else key.replace(".", "-") for f, key in zip(fields, overrides)]
    points = []
    for combination in itertools.product(*overrides.values()):
        parts = [f"{name}-{_name_part(text)}" for name, (text, _) in zip(names, combination)]
        points.append(("_" + "_".join(parts), dict(zip(overrides, combination))))
    return points


def _name_part(text: str) -> str:
    """A value's text as part of a directory name."""
    return re.sub(r"[^A-Za-z0-9.\-]+", "_", text).strip("_") or "empty"


def format_seeds(seeds: Sequence[int]) -> str:
    """A seed spec ``parse_seeds`` reads back as ``seeds``: runs of three or more as ranges, others
    listed: ``(0, 1, 2)`` -> ``"0-2"``, ``(1, 5, 9)`` -> ``"1,5,9"``; one seed k is ``"k-k"``, since
    ``"7"`` reads as a count."""
    parts, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        if j - i >= 2 or len(seeds) == 1:
            parts.append(f"{seeds[i]}-{seeds[j]}")
        else:
            parts.extend(str(s) for s in seeds[i : j + 1])
        i = j + 1
    return ",".join(parts)


DEVIATION_INFIX = "_with_"


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
            or not _NAME.match(name)
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
            f"{key}={_text(_deviation_entry(ablate, key, schema).value)}" for key in arm.deviation[2]
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


def _deviation_entry(ablate: Setting, key: str, schema: Schema) -> Entry:
    """The ablate setting's entry of ``key``, or the dataclass default it leaves the key at."""
    from repro.settings import with_defaults

    return with_defaults(ablate, schema(ablate.algo))[key]


def parse_deviation(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``run-job --deviation SETTING:NAME:KEY,KEY`` -> ``Arm.deviation``."""
    setting, name, keys = text.split(":", 2)
    return setting, name, tuple(keys.split(","))


def format_deviation(deviation: tuple[str, str, tuple[str, ...]]) -> str:
    """``Arm.deviation`` as ``run-job --deviation`` takes it (``parse_deviation``)."""
    setting, name, keys = deviation
    return f"{setting}:{name}:{','.join(keys)}"


def resolve_job_setting(
    arm: str,
    profile: Profile,
    env: str | None = None,
    seed: int | None = None,
    device: str | None = None,
    settings_dir: Path = SETTINGS_DIR,
    schema: Schema = default_schema,
    *,
    threads: int | None = None,
    point: Point | None = None,
    deviation: tuple[str, str, tuple[str, ...]] | None = None,
) -> tuple[Setting, dict[str, type]]:
    """The setting ``arm`` with an ablation arm's ``deviation`` (the ablate setting's entries of its
    keys, sources kept), scaled by ``profile``, with the command line's ``--set`` values (``point``),
    the plan's env id and seed (and the slot's device, and the job's CPUs as its torch threads when
    the scheduler was given them)."""
    setting = load_setting(arm, settings_dir, schema)
    classes = schema(setting.algo)
    if deviation is not None:
        ablate = load_setting(deviation[0], settings_dir, schema)
        setting = override(setting, {k: _deviation_entry(ablate, k, schema) for k in deviation[2]}, classes)
    setting = apply_profile(setting, profile, classes)
    if point:
        setting = override(setting, command_line_entries(point), classes)
    per_job: dict[str, Entry] = {}
    if env is not None:
        per_job["env.id"] = Entry(env, "experiment plan", "plan", "plan")
    if seed is not None:
        per_job["runner.seed"] = Entry(seed, "experiment plan: seed index", "plan", "plan")
    if device is not None:
        per_job["runner.device"] = Entry(device, "scheduler slot", "plan", "scheduler")
    if threads is not None:
        per_job["runner.torch_threads"] = Entry(threads, "scheduler: CPUs per job", "plan", "scheduler")
    try:
        return override(setting, per_job, classes), classes
    except ConfigError as e:
        # The env id is the only per-job value that can be wrong: say which game, without the file.
        message = str(e)
        if env is not None and "EnvConfig.id" in message:
            raise ConfigError(f"unknown game or env '{env}': {message.split('EnvConfig.id: ')[-1]}") from e
        raise


@cache
def _env_spaces(env_config: Any) -> tuple[Any, Any]:
    from algorithms.samplers.base import env_spaces

    return env_spaces(env_config)


def check_model_fits(arm: str, config: Any, setting: Setting | None = None) -> None:
    """Build the arm's model for one env of the job's env config, and check that its replay holds
    one training item: an observation shape the model cannot take (e.g. the Nature torso on
    MinAtar's 10x10 maps) or a replay too small for one R2D1 sequence is a ``ConfigError`` naming
    the file that set the replay size, raised while planning instead of inside every job."""
    from algorithms import registry

    observation_space, action_space = _env_spaces(config.env)
    try:
        registry.build_agent(config.algo, config.algo_config, observation_space, action_space)
    except ValueError as e:
        raise ConfigError(
            f"setting '{arm}' cannot run on env '{config.env.id}' (observations "
            f"{tuple(observation_space.shape)}): {str(e).splitlines()[0]}"
        ) from e
    try:
        registry.check_replay(config.algo, config.algo_config, config.sampler.batch_B, observation_space)
    except ValueError as e:
        entry = setting.entries.get("algo.replay_size_steps") if setting is not None else None
        where = f"{entry.file} 'algo.replay_size_steps'" if entry and entry.file else f"setting '{arm}'"
        raise ConfigError(
            f"{where}: the replay cannot hold one training item with sampler.batch_B="
            f"{config.sampler.batch_B} on env '{config.env.id}': {str(e).splitlines()[0]}"
        ) from e


def expand(
    plan: Plan,
    seeds: Any,
    profile_name: str,
    root: Path,
    experiment: str | None = None,
    envs: Sequence[str] | None = None,
    arms: Sequence[str] | None = None,
    settings_dir: Path = SETTINGS_DIR,
    schema: Schema = default_schema,
    overrides: Overrides | None = None,
) -> list[Job]:
    """Every job of ``plan``: arms (each once per ``--set`` sweep point) x envs x seeds (a seed spec,
    ``parse_seeds``), all configs resolved and validated."""
    seeds = parse_seeds(seeds)
    points = sweep_points(overrides)
    profile = load_profile(profile_name)
    experiment = experiment or f"{plan.name}-{profile.name}"
    if not _NAME.match(experiment):
        raise ConfigError(f"experiment name {experiment!r} is not a valid directory name")
    jobs = []
    plan_arms = ablation_arms(plan, settings_dir, schema)
    if arms:
        by_name = {a.name: a for a in plan_arms}
        plan_arms = [by_name[a] if a in by_name and plan.ablate else Arm(a, a) for a in arms]
    for spec, (suffix, point) in itertools.product(plan_arms, points):
        arm = spec.setting
        check_arm_name(arm, "ARMS" if arms else f"{plan.path} [plan] 'arms'")
        for env in envs or plan.envs:
            setting, classes = resolve_job_setting(
                arm, profile, env, 0, None, settings_dir, schema, point=point, deviation=spec.deviation
            )
            config = train_config(setting, classes)
            check_extras(arm, config.env)
            check_model_fits(arm, config, setting)
            name = (setting.name if spec.deviation is None else spec.name) + suffix
            for seed in seeds:
                # The seed is the only per-seed value: replacing it re-validates just RunnerConfig,
                # which keeps a large seed count quick to plan (the job resolves the same config).
                runner = dataclasses.replace(config.runner, seed=seed)
                jobs.append(
                    Job(
                        experiment=experiment,
                        arm=name,
                        setting=arm,
                        env=env,
                        seed=seed,
                        profile=profile.name,
                        profile_path=profile.path,
                        run_dir=run_path(Path(root), experiment, name, env, seed),
                        config=dataclasses.replace(config, runner=runner),
                        overrides=tuple((key, text) for key, (text, _) in point.items()),
                        deviation=spec.deviation,
                    )
                )
    return jobs


def pack_jobs(jobs: Sequence[Job], k: int) -> list[tuple[Job, ...]]:
    """``jobs`` in packs of up to ``k`` (``run --pack``): the jobs of one arm, profile and env,
    whose configs differ only in the seed, ``k`` at a time in plan order (``k=2`` over seeds 0..2:
    seeds 0 and 1, then 2 alone); different arms or envs never share a pack. ``k=1``: each job alone,
    in plan order."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k == 1:
        return [(job,) for job in jobs]
    groups: dict[tuple[str, str, Path, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.setting, job.arm, job.profile_path, job.env), []).append(job)
    return [tuple(group[i : i + k]) for group in groups.values() for i in range(0, len(group), k)]
