"""Profiles: scale an experiment to a machine without touching the algorithm.

A profile (``repro/configs/profiles/<name>.toml``) overrides, per algorithm (``[r2d1.runner]``) and
optionally per setting (``[ppo_atari.algo]``, applied after its algorithm's), only keys in
``BUDGET_KEYS`` (how much to run: steps, replay size, learning start, environments, evaluation)
and ``EXECUTION_KEYS`` (how to run it: threads, sampler processes, logging). Anything else is
refused when the profile is loaded, so a profile cannot change a hyperparameter of the algorithm;
``python -m repro diff A A@smoke`` lists exactly what a profile changed. Format::

    [profile]
    description = "..."

    [r2d1.runner]
    n_steps = { value = 4_000, source = "why this budget" }
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from algorithms.configs import ConfigError, unknown_key_message
from repro.settings import CONFIG_DIR, SECTIONS, Entry, Setting, override, parse_entry, read_toml

PROFILES_DIR = CONFIG_DIR / "profiles"
REPO_ROOT = CONFIG_DIR.resolve().parents[1]

# Budget: the amount of experience and evaluation, and the memory that holds it. Replay size and
# learning start are budget-type because a shorter run cannot fill a paper-sized replay; the
# number of environments and the sampler batch shape set how the same steps are collected.
BUDGET_KEYS: frozenset[str] = frozenset(
    {
        "runner.n_steps",
        "runner.eval_interval_steps",
        "sampler.batch_T",
        "sampler.batch_B",
        "sampler.eval_n_envs",
        "sampler.eval_episodes",
        "sampler.eval_max_steps",
        # Algorithm fields (names as the algorithm Configs spell them).
        "algo.replay_size_steps",
        "algo.learning_starts_steps",
        "algo.random_steps",  # uniform-random warm-up before learning (TD3 Sec. 6.1), a learning start
        # Schedules the papers define over the whole run ("annealed from 1 to 0 over training",
        # Schulman et al. 2017 Table 5; IS exponent "to 1 by the end of learning", Schaul et al. 2016).
        "algo.anneal_env_steps",
        "algo.priority_beta_steps",
        "algo.priority_beta_anneal_updates",
    }
)
# Execution: where and how the same computation runs, and how often it is written down.
EXECUTION_KEYS: frozenset[str] = frozenset(
    {
        "runner.log_interval_steps",
        "runner.checkpoint_interval_steps",
        "runner.torch_threads",
        "runner.device",
        "runner.tensorboard",
        "sampler.mode",
        "sampler.n_workers",
        "sampler.env_workers",
        "sampler.worker_cpus",
        "env.num_threads",
    }
)
ALLOWED_KEYS = BUDGET_KEYS | EXECUTION_KEYS


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    changes: dict[str, dict[str, Entry]]  # algorithm or setting name -> {"section.key": Entry}

    def changes_for(self, setting: Setting) -> dict[str, Entry]:
        """The profile's changes for ``setting``: its algorithm's tables, then the setting's own."""
        if self.changes and setting.algo not in self.changes:
            raise ConfigError(
                f"{self.path}: profile '{self.name}' has no [{setting.algo}.*] tables, "
                f"so it does not say how to scale algorithm '{setting.algo}'"
            )
        return {**self.changes.get(setting.algo, {}), **self.changes.get(setting.name, {})}


def available_profiles(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    return sorted(p.stem for p in Path(profiles_dir).glob("*.toml"))


def is_shipped(path: Path | str) -> bool:
    """Whether ``path`` is one of the profiles in ``repro/configs/profiles``, loadable by its name."""
    return Path(path).resolve().parent == PROFILES_DIR.resolve()


def profile_label(path: Path | str) -> str:
    """How records and reports name a profile: a shipped profile by its name, any other file by its
    path relative to the repository (absolute outside it), so no record carries the path of the
    checkout that ran it."""
    if is_shipped(path):
        return Path(path).stem
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(resolved)


def load_profile(name_or_path: str, profiles_dir: Path = PROFILES_DIR) -> Profile:
    """Load a profile; a key outside ``ALLOWED_KEYS`` is a ``ConfigError`` naming the file and key."""
    if name_or_path.endswith(".toml"):
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"profile file {name_or_path} does not exist")
    else:
        path = Path(profiles_dir) / f"{name_or_path}.toml"
        if not path.is_file():
            known = available_profiles(profiles_dir)
            raise ConfigError(
                f"unknown profile '{name_or_path}'; " + unknown_key_message(name_or_path, known)
            )
    data = read_toml(path)
    meta = data.pop("profile", None)
    if not isinstance(meta, Mapping) or not isinstance(meta.get("description"), str):
        raise ConfigError(f"{path}: missing [profile] table with a 'description' string")
    for key in meta:
        if key != "description":
            raise ConfigError(f"{path} [profile]: unknown key '{key}'; known: description")
    from algorithms.registry import ALGORITHMS
    from repro.settings import available_settings

    known = sorted(ALGORITHMS) + available_settings()
    changes: dict[str, dict[str, Entry]] = {}
    for algo, tables in data.items():
        if algo not in known:
            raise ConfigError(
                f"{path}: [{algo}.*] names neither an algorithm nor a setting; "
                + unknown_key_message(algo, known)
            )
        if not isinstance(tables, Mapping):
            raise ConfigError(f"{path}: '{algo}' must be a table of [{algo}.<section>] tables")
        algo_changes: dict[str, Entry] = {}
        for section, table in tables.items():
            if section not in SECTIONS or not isinstance(table, Mapping):
                raise ConfigError(
                    f"{path}: [{algo}.{section}] is not one of {[f'{algo}.{s}' for s in SECTIONS]}"
                )
            for key, raw in table.items():
                name = f"{section}.{key}"
                where = f"{path} [{algo}.{section}] '{key}'"
                if name not in ALLOWED_KEYS:
                    raise ConfigError(
                        f"{where}: a profile may change only budget or execution keys, not '{name}' "
                        "(see repro.profiles.BUDGET_KEYS / EXECUTION_KEYS)"
                    )
                value, source, _ = parse_entry(raw, where, origins=("published",))
                algo_changes[name] = Entry(value, f"profile {path.stem}: {source}", "profile", str(path))
        changes[algo] = algo_changes
    return Profile(path.stem, path, meta["description"], changes)


def apply_profile(setting: Setting, profile: Profile, classes: Mapping[str, type]) -> Setting:
    """``setting`` scaled by ``profile`` (validated again by the dataclasses)."""
    return override(setting, profile.changes_for(setting), classes)
