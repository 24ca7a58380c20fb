"""Experiment plans: arms x environments x seeds, expanded into jobs.

A plan (``repro/configs/plans/<name>.toml``)::

    [plan]
    title = "..."
    arms = ["rlpyt_r2d1_published", "r2d1_corrected"]     # setting names (or paths to .toml files)
    envs = ["pong", "seaquest"]                            # env ids (EnvConfig.id)
    envs_source = "where the env list comes from"

Each job is one (arm, env, seed) with its fully resolved ``TrainConfig`` (setting, then profile,
then the plan's env id and seed), and its run directory ``<root>/<experiment>/<arm>/<env>/seed<k>``
(docs/ARCHITECTURE.md, Contract 5). Everything is validated while expanding, before any directory
is created: an unknown arm, game, profile or a bad seed count is a ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from algorithms.configs import ConfigError, unknown_key_message
from algorithms.rundir import run_path
from repro.profiles import Profile, apply_profile, load_profile
from repro.settings import (
    CONFIG_DIR,
    SETTINGS_DIR,
    Entry,
    Schema,
    Setting,
    default_schema,
    load_setting,
    override,
    read_toml,
    train_config,
)

PLANS_DIR = CONFIG_DIR / "plans"
PLAN_KEYS = {"title": str, "description": str, "arms": list, "envs": list, "envs_source": str}
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
        if not isinstance(value, PLAN_KEYS[key]):
            raise ConfigError(
                f"{path} [plan] '{key}': expected {PLAN_KEYS[key].__name__}, got {type(value).__name__}"
            )
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
    return Plan(
        path.stem, path, meta["title"], meta.get("description", ""), tuple(meta["arms"]), tuple(meta["envs"]),
        meta["envs_source"],
    )  # fmt: skip


def check_arm_name(arm: str, where: str) -> None:
    """An arm is a setting's name or a path to its ``.toml`` file; the name (the file's stem) names
    the arm's directory, so it must be a plain name: ``...toml`` would make the arm ``..``."""
    name = Path(arm).stem if arm.endswith(".toml") else arm
    if not _NAME.match(name):
        raise ConfigError(
            f"{where}: {arm!r} gives the arm name {name!r}, which is not a valid directory name"
        )


def parse_list(text: str | None, what: str) -> tuple[str, ...] | None:
    """``"pong, qbert"`` -> ``("pong", "qbert")``; empty or None -> None (use the plan's own)."""
    if text is None or not text.strip():
        return None
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    for item in items:
        if not _NAME.match(item):
            raise ConfigError(f"{what}: {item!r} is not a valid name")
    if len(set(items)) != len(items):
        raise ConfigError(f"{what}: duplicate entries in {text!r}")
    return items


def check_seeds(seeds: Any) -> int:
    if isinstance(seeds, bool) or not isinstance(seeds, int):
        try:
            seeds = int(str(seeds).strip())
        except ValueError:
            raise ConfigError(f"SEEDS must be a positive integer, got {seeds!r}") from None
    if seeds < 1:
        raise ConfigError(f"SEEDS must be a positive integer, got {seeds}")
    if seeds > MAX_SEEDS:
        raise ConfigError(f"SEEDS must be at most {MAX_SEEDS}, got {seeds}")
    return seeds


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
) -> tuple[Setting, dict[str, type]]:
    """The setting ``arm`` scaled by ``profile`` with the plan's env id and seed (and the slot's device,
    and the job's CPUs as its torch threads when the scheduler was given them)."""
    setting = load_setting(arm, settings_dir, schema)
    classes = schema(setting.algo)
    setting = apply_profile(setting, profile, classes)
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
    seeds: int,
    profile_name: str,
    root: Path,
    experiment: str | None = None,
    envs: Sequence[str] | None = None,
    arms: Sequence[str] | None = None,
    settings_dir: Path = SETTINGS_DIR,
    schema: Schema = default_schema,
) -> list[Job]:
    """Every job of ``plan``: arms x envs x seeds 0..seeds-1, all configs resolved and validated."""
    seeds = check_seeds(seeds)
    profile = load_profile(profile_name)
    experiment = experiment or f"{plan.name}-{profile.name}"
    if not _NAME.match(experiment):
        raise ConfigError(f"experiment name {experiment!r} is not a valid directory name")
    jobs = []
    for arm in arms or plan.arms:
        check_arm_name(arm, "ARMS" if arms else f"{plan.path} [plan] 'arms'")
        for env in envs or plan.envs:
            setting, classes = resolve_job_setting(arm, profile, env, 0, None, settings_dir, schema)
            config = train_config(setting, classes)
            check_model_fits(arm, config, setting)
            for seed in range(seeds):
                # The seed is the only per-seed value: replacing it re-validates just RunnerConfig,
                # which keeps a large seed count quick to plan (the job resolves the same config).
                runner = dataclasses.replace(config.runner, seed=seed)
                jobs.append(
                    Job(
                        experiment=experiment,
                        arm=setting.name,
                        setting=arm,
                        env=env,
                        seed=seed,
                        profile=profile.name,
                        profile_path=profile.path,
                        run_dir=run_path(Path(root), experiment, setting.name, env, seed),
                        config=dataclasses.replace(config, runner=runner),
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
    groups: dict[tuple[str, Path, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.setting, job.profile_path, job.env), []).append(job)
    return [tuple(group[i : i + k]) for group in groups.values() for i in range(0, len(group), k)]
