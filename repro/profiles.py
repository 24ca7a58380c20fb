"""Profiles: scale an experiment to a machine without touching the algorithm.

A profile (``repro/configs/profiles/<name>.toml``) overrides budget keys (how much to run: steps,
replay size, learning start, environments, evaluation; ``is_budget_key``) and execution keys (how to
run it: threads, sampler processes, logging; ``EXECUTION_KEYS``). Anything else is refused when the
profile is loaded, so a profile cannot change a hyperparameter of the algorithm; ``python -m repro
diff A A@smoke`` lists exactly what a profile changed. Its tables apply in this order, a later one
replacing an earlier one key by key:

1. ``[default.<section>]``: every algorithm, each key only where the section's dataclass has that
   field (a ``default.algo`` key an algorithm's Config lacks is skipped), so an algorithm the profile
   does not name still gets its budget;
2. ``[<algorithm>.<section>]`` (``[r2d1.runner]``): that algorithm, strictly (a key its Config lacks
   is an error);
3. ``[<setting>.<section>]`` (``[ppo_atari.algo]``): that setting, for schedules defined over the
   whole run.

A profile with algorithm tables and no default table must name the algorithm of every setting it
scales. Format::

    [profile]
    description = "..."

    [default.runner]
    n_steps = { value = 2_000, source = "why this budget" }
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from algorithms.configs import RENAMED, ConfigError, field_types, unknown_key_message
from protocol.files import PROFILES_DIR, read_toml
from repro.settings import SECTIONS, Entry, Setting, override, parse_entry

# Budget: the amount of experience and evaluation, and the memory that holds it. Replay size and
# learning start are budget-type because a shorter run cannot fill a paper-sized replay; the
# number of environments and the sampler batch shape set how the same steps are collected.
# These are the budget keys of the sections every algorithm shares (algorithms/train.py).
RUN_BUDGET_KEYS: frozenset[str] = frozenset(
    {
        "runner.n_steps",
        "runner.eval_interval_steps",
        "sampler.batch_T",
        "sampler.batch_B",
        "sampler.eval_n_envs",
        "sampler.eval_episodes",
        "sampler.eval_max_steps",
    }
)
# An algorithm's own budget fields are recognised by name, so a new algorithm's Config needs no entry
# here. A budget field counts env steps or updates (Contract 4's units in names) and is one of:
# a replay's capacity (``replay_size_*``); a learning start (``learning_starts_*``, or ``random_steps``,
# the uniform-random warm-up before learning, TD3 Sec. 6.1); a schedule the papers define over the
# whole run, named with the word ``anneal`` ("annealed from 1 to 0 over training", Schulman et al.
# 2017 Table 5; IS exponent "to 1 by the end of learning", Schaul et al. 2016).
BUDGET_UNITS = ("_steps", "_updates")
ALGO_BUDGET_PREFIXES = ("replay_size_", "learning_starts_")
ALGO_BUDGET_NAMES = frozenset({"random_steps"})
ALGO_BUDGET_WORD = "anneal"
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
# The table name of the rule for every algorithm (``[default.runner]``); no algorithm or setting
# can be named "default" in a profile.
DEFAULT = "default"


def is_budget_key(name: str) -> bool:
    """Whether ``"section.key"`` is budget-type: ``RUN_BUDGET_KEYS``, or an ``algo`` field named by
    the rule above."""
    section, _, key = name.partition(".")
    if section != "algo":
        return name in RUN_BUDGET_KEYS
    if not key.endswith(BUDGET_UNITS):
        return False
    return (
        key in ALGO_BUDGET_NAMES or key.startswith(ALGO_BUDGET_PREFIXES) or ALGO_BUDGET_WORD in key.split("_")
    )


def is_allowed_key(name: str) -> bool:
    """Whether a profile may change ``"section.key"``: a budget or an execution key."""
    return is_budget_key(name) or name in EXECUTION_KEYS


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    changes: dict[str, dict[str, Entry]]  # algorithm or setting name -> {"section.key": Entry}
    default: dict[str, Entry]  # the [default.*] tables: {"section.key": Entry}

    def changes_for(self, setting: Setting, classes: Mapping[str, type]) -> dict[str, Entry]:
        """The profile's changes for ``setting`` (whose section dataclasses are ``classes``): the
        default tables' keys those dataclasses have, then its algorithm's tables, then its own."""
        if self.changes and not self.default and setting.algo not in self.changes:
            raise ConfigError(
                f"{self.path}: profile '{self.name}' has no [{setting.algo}.*] tables and no "
                f"[{DEFAULT}.*] tables, so it does not say how to scale algorithm '{setting.algo}'"
            )
        default = {}
        for name, entry in self.default.items():
            section, _, key = name.partition(".")
            if key in field_types(classes[section]):
                default[name] = entry
        return {**default, **self.changes.get(setting.algo, {}), **self.changes.get(setting.name, {})}


def available_profiles(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    return sorted(p.stem for p in Path(profiles_dir).glob("*.toml"))


def load_profile(name_or_path: str, profiles_dir: Path = PROFILES_DIR) -> Profile:
    """Load a profile; a key ``is_allowed_key`` refuses is a ``ConfigError`` naming the file and key."""
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
    for target, tables in data.items():
        if target != DEFAULT and target not in known:
            raise ConfigError(
                f"{path}: [{target}.*] names neither an algorithm nor a setting nor [{DEFAULT}.*]; "
                + unknown_key_message(target, known)
            )
        if not isinstance(tables, Mapping):
            raise ConfigError(f"{path}: '{target}' must be a table of [{target}.<section>] tables")
        target_changes: dict[str, Entry] = {}
        for section, table in tables.items():
            if section not in SECTIONS or not isinstance(table, Mapping):
                raise ConfigError(
                    f"{path}: [{target}.{section}] is not one of {[f'{target}.{s}' for s in SECTIONS]}"
                )
            for key, raw in table.items():
                name = f"{section}.{key}"
                where = f"{path} [{target}.{section}] '{key}'"
                if key in RENAMED:
                    raise ConfigError(f"{where}: key '{key}' was renamed to '{RENAMED[key]}'")
                if not is_allowed_key(name):
                    raise ConfigError(
                        f"{where}: a profile may change only budget or execution keys, not '{name}' "
                        "(see repro.profiles.is_budget_key / EXECUTION_KEYS)"
                    )
                value, source, _ = parse_entry(raw, where, origins=("published",))
                target_changes[name] = Entry(value, f"profile {path.stem}: {source}", "profile", str(path))
        changes[target] = target_changes
    default = changes.pop(DEFAULT, {})
    return Profile(path.stem, path, meta["description"], changes, default)


def apply_profile(setting: Setting, profile: Profile, classes: Mapping[str, type]) -> Setting:
    """``setting`` scaled by ``profile`` (validated again by the dataclasses)."""
    return override(setting, profile.changes_for(setting, classes), classes)


# Where gymnasium registers the classic-control envs (CartPole, Acrobot, MountainCar, Pendulum).
CLASSIC_CONTROL = "gymnasium.envs.classic_control"


def uncut_classic_control(setting: Setting, classes: Mapping[str, type]) -> dict[str, Entry]:
    """``{"sampler.eval_max_steps": the env's time limit}`` when ``setting`` runs a classic-control env
    whose evaluation a profile caps below its own time limit, else ``{}`` (a cap the setting or the
    command line gives stands): a profile's short cap (the smoke profile's 200 steps) saves time on
    Atari, but a classic-control episode of 500 steps costs milliseconds, and a cut one reads a good
    CartPole agent as a bad one (an evaluation at the cap of 200 scores 200 of 500)."""
    from repro.settings import train_config

    capped = setting.entries.get("sampler.eval_max_steps")
    if capped is None or capped.origin != "profile":  # a setting's or the command line's own cap stands
        return {}
    config = train_config(setting, classes)
    if config.env.kind != "gym":
        return {}
    import gymnasium

    try:
        spec = gymnasium.spec(config.env.id)
    except gymnasium.error.Error:  # an id the env config refuses later, naming it
        return {}
    limit = config.env.max_episode_steps or spec.max_episode_steps
    if not str(spec.entry_point).startswith(CLASSIC_CONTROL) or not limit:
        return {}
    if config.sampler.eval_max_steps >= limit:
        return {}
    source = (
        f"the env's own time limit ({config.env.id}: {limit} steps): classic-control evaluations are "
        "cheap, so no profile cuts them shorter (repro.profiles.uncut_classic_control)"
    )
    return {"sampler.eval_max_steps": Entry(limit, source, "harness", "harness")}
