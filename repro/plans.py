"""Experiment plans: arms x environments x seeds, expanded into jobs.

A plan (``repro/configs/plans/<name>.toml``)::

    [plan]
    title = "..."
    arms = ["rlpyt_r2d1_published", "r2d1_corrected"]     # setting names (or paths to .toml files)
    envs = ["pong", "seaquest"]                            # env ids (EnvConfig.id)
    envs_source = "where the env list comes from"

    seeds = "100-104"                                      # optional: the default of --seeds
    ablate = "rlpyt_r2d1_published"                        # optional: leave-one-out arms (repro/ablation.py)
    design = "fractional"                                  # optional, with ablate: protocol/design.py
    resolution = 4                                         #   a fraction's: resolution = N or
    generators = ["E=BCD", "F=ACD", "G=ABC", "H=ABD"]      #   generators (design = "factorial": neither)
    pilot = "docs/results/r2d1_minatar.csv"                # optional: plan the seeds (repro/power.py)
    peers = ["sb3_ppo_atari_zoo"]                          # optional: arms another program runs

    [analysis]                                             # optional: the analysis, fixed before the data
    ...                                                    # (repro/preregister.py)

An ablation plan (``ablate``) runs leave-one-out arms beside its one arm (``repro.ablation``), or with
``design`` the arms of a two-level factorial design of the same switches (``protocol.design``). A top-level
``[analysis]`` table is the analysis fixed before the data (``plan_analysis``, repro/preregister.py).

Each job is one (arm, env, seed) with its fully resolved ``TrainConfig`` (setting, then profile, then
the command line's ``--set`` values, then the plan's env id and seed), and its run directory
``<root>/<experiment>/<arm>/<env>/seed<k>`` (docs/ARCHITECTURE.md, Contract 5). A setting runs
without a plan file too (``setting_plan``: one arm, the envs given or the setting's own ``env.id``).
``--set section.key=a,b,c`` makes a sweep: one arm per value (per combination for several keys),
named by its values (``arm_suffix``; a value the arm has already is that arm, not another one:
``without_base_values``). Everything is validated while expanding, before any
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
from protocol.design import DESIGNS
from protocol.files import PLANS_DIR, REPO_ROOT, SETTINGS_DIR, read_toml
from protocol.plan_args import NAME, check_arm_name, parse_seeds
from protocol.registration import AnalysisSection, parse_section
from repro.ablation import Arm, ablation_arms, deviation_entry, deviation_groups
from repro.extras import check_extras
from repro.memory import check_replay_memory, model_too_large
from repro.plan_file import PLAN_KEYS, PLAN_TABLES, Plan
from repro.profiles import Profile, apply_profile, is_budget_key, load_profile, uncut_classic_control
from repro.settings import (
    SET_OPTION,
    Entry,
    Overrides,
    Schema,
    Setting,
    command_line_entries,
    default_schema,
    load_setting,
    override,
    train_config,
)


@dataclass(frozen=True)
class Job:
    """One run of the plan. ``config`` is the resolved ``algorithms.run_config.TrainConfig``."""

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
    if not set(data) <= PLAN_TABLES or not all(isinstance(data[t], Mapping) for t in data) or meta is None:
        raise ConfigError(f"{path}: a plan file has a [plan] table and at most an [analysis] table")
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
        if not NAME.match(env):
            raise ConfigError(f"{path} [plan] 'envs': {env!r} is not a valid name (it names a directory)")
    for arm in meta["arms"]:
        check_arm_name(arm, f"{path} [plan] 'arms'")
    for peer in meta.get("peers", []):
        if not isinstance(peer, str):
            raise ConfigError(f"{path} [plan] 'peers': expected a list of arm names, got {peer!r}")
        check_arm_name(peer, f"{path} [plan] 'peers'")
        if peer in meta["arms"]:
            raise ConfigError(
                f"{path} [plan] 'peers': {peer!r} is also in 'arms'; a peer arm is run elsewhere"
            )
    if "ablate" in meta and len(meta["arms"]) != 1:
        raise ConfigError(
            f"{path} [plan] 'arms': an ablation plan (ablate = {meta['ablate']!r}) has one arm, the base "
            f"its deviations are switched on in, got {len(meta['arms'])}"
        )
    _check_design_keys(meta, path)
    if meta.get("first_seed", 0) < 0:
        raise ConfigError(f"{path} [plan] 'first_seed': expected a seed (>= 0), got {meta['first_seed']}")
    seeds = None
    if "seeds" in meta:
        seeds = str(meta["seeds"])
        parse_seeds(seeds, f"{path} [plan] 'seeds'")
    return Plan(
        path.stem, path, meta["title"], meta.get("description", ""), tuple(meta["arms"]), tuple(meta["envs"]),
        meta["envs_source"], seeds, ablate=meta.get("ablate"),
        pilot=str(REPO_ROOT / meta["pilot"]) if "pilot" in meta else None,
        design=meta.get("design"), resolution=meta.get("resolution"),
        generators=tuple(meta.get("generators", ())), analysis=data.get("analysis"),
        peers=tuple(meta.get("peers", ())), first_seed=meta.get("first_seed", 0),
    )  # fmt: skip


def plan_analysis(
    plan: Plan, settings_dir: Path = SETTINGS_DIR, schema: Schema = default_schema
) -> AnalysisSection | None:
    """The plan's ``[analysis]`` table checked against its arms (as their run directories name them),
    envs and design switches (``protocol.registration.parse_section``); None when it has none."""
    if plan.analysis is None:
        return None
    names = [a.name for a in ablation_arms(plan, settings_dir, schema)] + list(plan.peers)
    # A design's switches are its deviation groups; a leave-one-out plan's have no main effects to test.
    switches = list(deviation_groups(plan, settings_dir, schema)[2]) if plan.design else []
    return parse_section(plan.analysis, str(plan.path), names, plan.envs, switches)


def _check_design_keys(meta: Mapping[str, Any], path: Path) -> None:
    """The design keys' form (protocol/design.py); whether the design fits the switches is checked with
    them (``repro.ablation.plan_design``)."""
    where = f"{path} [plan]"
    for key in ("design", "resolution", "generators"):
        if key in meta and "ablate" not in meta:
            raise ConfigError(f"{where} '{key}': a design needs ablate = SETTING (the switches it varies)")
    if "design" not in meta:
        if "resolution" in meta or "generators" in meta:
            key = "resolution" if "resolution" in meta else "generators"
            raise ConfigError(f"{where} '{key}': needs design = \"fractional\"")
        return
    if meta["design"] not in DESIGNS:
        raise ConfigError(f"{where} 'design': {meta['design']!r}; expected one of {', '.join(DESIGNS)}")
    given = [k for k in ("resolution", "generators") if k in meta]
    if meta["design"] == "factorial" and given:
        raise ConfigError(f"{where} '{given[0]}': the full factorial has none (design = \"fractional\")")
    if meta["design"] == "fractional" and not given:
        raise ConfigError(f"{where} 'design': a fraction needs resolution = N or generators = [\"E=BCD\"]")
    if "generators" in meta and (
        not meta["generators"] or not all(isinstance(g, str) for g in meta["generators"])
    ):
        raise ConfigError(f"{where} 'generators': expected a non-empty list of strings (\"E=BCD\")")


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


Point = dict[str, tuple[str, Any]]  # one value per ``--set`` key: "section.key" -> (text, value)


def sweep_points(overrides: Overrides | None) -> list[Point]:
    """One point per combination of the ``--set`` values (``settings.parse_overrides``): one empty
    point without overrides, else the Cartesian product in the order given. ``expand`` names each
    arm by its values (``arm_suffix``: ``_learning_rate-1e-4``), so runs of other values never share a
    run directory, less the values the arm has already (``without_base_values``). A sweep over a
    budget key (``repro.profiles.is_budget_key``) is refused: arms compared in one report must have
    had the same budget."""
    if not overrides:
        return [{}]
    for key, values in overrides.items():
        if len(values) > 1 and is_budget_key(key):
            texts = ",".join(text for text, _ in values)
            raise ConfigError(
                f"{SET_OPTION} {key}={texts}: a sweep over a budget key is refused (arms compared in one "
                "report need the same budget); run one value per experiment with --exp"
            )
    return [dict(zip(overrides, c)) for c in itertools.product(*overrides.values())]


def arm_suffix(overrides: Overrides, point: Point) -> str:
    """The arm name's suffix of ``point`` (some of ``overrides``' keys with one value each): each
    key's field name (its ``section-field`` where two sections share the field) and value."""
    fields = [key.partition(".")[2] for key in overrides]
    names = {key: f if fields.count(f) == 1 else key.replace(".", "-") for f, key in zip(fields, overrides)}
    return "".join(f"_{names[key]}-{_name_part(text)}" for key, (text, _) in point.items())


def without_base_values(point: Point, base: Any) -> Point:
    """``point`` less the keys whose value ``base`` (the arm's resolved ``TrainConfig`` without
    ``--set``) already has: a sweep value equal to the setting's own is the setting's arm, not a second
    arm of the same config under another name."""
    kept = {}
    for key, (text, value) in point.items():
        section, _, field = key.partition(".")
        # An unknown key stays: resolving the point refuses it, naming the key.
        has = getattr(base.algo_config if section == "algo" else getattr(base, section, None), field, point)
        same = list(has) == list(value) if isinstance(has, list | tuple) else has == value
        if not same:
            kept[key] = (text, value)
    return kept


def _name_part(text: str) -> str:
    """A value's text as part of a directory name."""
    return re.sub(r"[^A-Za-z0-9.\-]+", "_", text).strip("_") or "empty"


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
    the scheduler was given them); a classic-control env's evaluations are not cut below its own time
    limit (``repro.profiles.uncut_classic_control``)."""
    setting = load_setting(arm, settings_dir, schema)
    classes = schema(setting.algo)
    if deviation is not None:
        ablate = load_setting(deviation[0], settings_dir, schema)
        setting = override(setting, {k: deviation_entry(ablate, k, schema) for k in deviation[2]}, classes)
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
        setting = override(setting, per_job, classes)
        return override(setting, uncut_classic_control(setting, classes), classes), classes
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
    the file that set the replay size, and a model larger than this machine's memory, raised while
    planning instead of inside every job."""
    from algorithms import registry

    observation_space, action_space = _env_spaces(config.env)
    try:
        registry.build_agent(config.algo, config.algo_config, observation_space, action_space)
    except ValueError as e:
        raise ConfigError(
            f"setting '{arm}' cannot run on env '{config.env.id}' (observations "
            f"{tuple(observation_space.shape)}): {str(e).splitlines()[0]}"
        ) from e
    except RuntimeError as e:
        if (too_large := model_too_large(arm, config, setting, e)) is None:
            raise
        raise too_large from None
    try:
        registry.check_replay(config.algo, config.algo_config, config.sampler.batch_B, observation_space)
    except ValueError as e:
        entry = setting.entries.get("algo.replay_size_steps") if setting is not None else None
        where = f"{entry.file} 'algo.replay_size_steps'" if entry and entry.file else f"setting '{arm}'"
        raise ConfigError(
            f"{where}: the replay cannot hold one training item with sampler.batch_B="
            f"{config.sampler.batch_B} on env '{config.env.id}': {str(e).splitlines()[0]}"
        ) from e
    check_replay_memory(arm, config, setting, observation_space, action_space)


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
    ``parse_seeds``), all configs resolved and validated, in run order, so that a study stopped
    part-way (a session's end, a kill) leaves comparisons the analysis can make:

    * the plan's own arms (and sweep points) seed by seed, within a seed env by env, within an env
      every arm: whole seeds of balanced pairs, not every seed of the first arms and none of the last;
    * then an ablation plan's leave-one-out arms one after another, each seed by seed: each arm,
      once done, is one deviation's effect against the endpoints on all their seeds, where a
      seed-by-seed order over all of them would complete no deviation before the last seed;
    * a designed ablation's arms all seed by seed, as the plan's own arms: each seed is a replicate
      of the whole design, and every main effect rests on every replicate (``analysis.factorial``)."""
    seeds = parse_seeds(seeds)
    envs = envs or plan.envs
    points = sweep_points(overrides)
    profile = load_profile(profile_name)
    experiment = experiment or f"{plan.name}-{profile.name}"
    if not NAME.match(experiment):
        raise ConfigError(f"experiment name {experiment!r} is not a valid directory name")
    jobs = []
    plan_arms = ablation_arms(plan, settings_dir, schema)
    if arms:
        by_name = {a.name: a for a in plan_arms}
        plan_arms = [by_name[a] if a in by_name and plan.ablate else Arm(a, a) for a in arms]
    seen = set()
    for spec, point in itertools.product(plan_arms, points):
        arm = spec.setting
        check_arm_name(arm, "ARMS" if arms else f"{plan.path} [plan] 'arms'")
        swept = bool(point)
        if point:
            base = resolve_job_setting(
                arm, profile, envs[0], 0, None, settings_dir, schema, deviation=spec.deviation
            )
            point = without_base_values(point, train_config(*base))
        suffix = arm_suffix(overrides, point) if point else ""
        # A sweep value equal to the base's is the base's arm, once; an arm the plan lists twice is
        # refused by the caller (repro.cli_run), not merged here.
        if swept and (spec.name, suffix) in seen:
            continue
        seen.add((spec.name, suffix))
        for env in envs:
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
    env_order = {env: i for i, env in enumerate(envs)}
    seed_order = {seed: i for i, seed in enumerate(seeds)}
    arm_order = {arm: i for i, arm in enumerate(dict.fromkeys(job.arm for job in jobs))}

    def run_order(job: Job) -> tuple[int, ...]:
        ablation_arm = arm_order[job.arm] if job.deviation is not None and plan.design is None else -1
        return ablation_arm, seed_order[job.seed], env_order[job.env]

    return sorted(jobs, key=run_order)


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
