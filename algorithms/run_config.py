"""A run's typed configs (docs/ARCHITECTURE.md, Contract 6): ``SamplerConfig``, ``RunnerConfig`` and
``TrainConfig``, and their round trip through ``config.json`` (``config_to_dict`` /
``config_from_dict``: plain JSON types only, unknown keys and wrong types are one-line errors
naming the key). The entry that trains one is ``algorithms.train.train``; the runners and samplers
read these types without importing it, so no import runs back from them to the entry.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from algorithms import registry
from algorithms.configs import MAX_SEED, ConfigError, build, check_field, check_types, migrate_renamed
from algorithms.cpus import parse_cpus
from algorithms.rundir import ORIGINS_KEY

SAMPLER_MODES = ("serial", "cpu", "gpu", "alternating")
ENV_WORKER_KINDS = ("processes", "threads")
RUNNER_KINDS = ("sync", "async", "ddp")
REPLAY_RATIO_COUNTINGS = ("trained", "with_burnin")
CHECKPOINT_REPLAY = ("auto", "always", "never")
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")

# Contract 1: the env package defines EnvConfig; imported lazily so that reading a config.json does
# not import gymnasium and the simulators.
ENV_CONFIG_MODULE = "algorithms.envs.config"


def env_config_class() -> type:
    """The ``EnvConfig`` dataclass of ``algorithms.envs`` (Contract 1)."""
    import importlib

    return importlib.import_module(ENV_CONFIG_MODULE).EnvConfig


# The largest env-step budget a run may ask for: four times Agent57's 22.5 B env steps (90 B frames,
# Badia et al. 2020), the longest published Atari budget; a larger one is a typo, not an experiment.
MAX_ENV_STEPS = 100_000_000_000


def _check_cpu_list(config: Any, field: str) -> None:
    """A ``"0,2-3"`` CPU list field: a malformed one is a ``ValueError`` naming the field."""
    try:
        parse_cpus(getattr(config, field))
    except ValueError as error:
        raise ValueError(f"{type(config).__name__}.{field}: {error}") from None


@dataclass(frozen=True)
class SamplerConfig:
    """How experience is collected. A batch is ``batch_T`` steps of ``batch_B`` environments.

    ``n_workers`` splits the B environments across processes in the parallel modes; evaluation runs
    ``eval_episodes`` episodes on ``eval_n_envs`` separate environments, each episode capped at
    ``eval_max_steps`` env steps (27,000 steps = 108,000 frames at frameskip 4, the Atari cap of
    Machado et al. 2018, Sec. 5).

    ``env_workers`` (modes ``gpu`` and ``alternating``, whose workers only step envs): ``"processes"``
    runs them in ``n_workers`` worker processes (any env); ``"threads"`` lets an env that steps on its
    own threads (ale-py's native vector env: ``EnvConfig(kind="atari", backend="native")``, with
    ``EnvConfig.num_threads`` threads per group) be the workers in this process, which saves the
    process hand-offs of every step (see ``algorithms.samplers.parallel_gpu``).

    ``worker_cpus`` (parallel modes): a CPU list (``"0-3"``) cut into contiguous blocks, one per
    worker process (worker i and the threads it starts, an env's and torch's, run on block i), or
    with ``env_workers="threads"`` one per group's env threads; with more workers than CPUs, one CPU
    each, cycling (``algorithms.cpus.cpu_share``); ``""`` leaves them to the scheduler. A worker
    pinned to one CPU hands each step to its env threads and back on that core; and CPUs left out
    of the list stay free for the main process's inference: with a network acting in the main
    process, the env workers belong on the CPUs its inference does not use. Measured rates with and
    without pinning (``make bench-sampler``): docs/results/core_measurements.md (train.py).
    """

    mode: str = "serial"
    batch_T: int = 1
    batch_B: int = 1
    n_workers: int = 1
    env_workers: str = "processes"
    worker_cpus: str = ""
    eval_n_envs: int = 1
    eval_episodes: int = 10
    eval_max_steps: int = 27_000

    def __post_init__(self) -> None:
        check_types(self)
        check_field(self, self.mode in SAMPLER_MODES, "mode", f"one of {SAMPLER_MODES}")
        check_field(self, self.batch_T >= 1, "batch_T", ">= 1")
        check_field(self, self.batch_B >= 1, "batch_B", ">= 1")
        check_field(self, self.n_workers >= 1, "n_workers", ">= 1")
        check_field(self, self.n_workers <= self.batch_B, "n_workers", f"<= batch_B ({self.batch_B})")
        kinds = ENV_WORKER_KINDS
        check_field(self, self.env_workers in kinds, "env_workers", f"one of {kinds}")
        check_field(
            self,
            self.env_workers == "processes" or self.mode in ("gpu", "alternating"),
            "env_workers",
            f"'processes' with mode {self.mode!r} (threads serve only the env-only workers of "
            "'gpu' and 'alternating')",
        )
        _check_cpu_list(self, "worker_cpus")
        check_field(
            self,
            not self.worker_cpus or self.mode != "serial",
            "worker_cpus",
            "empty in mode 'serial' (it has no workers)",
        )
        check_field(self, self.eval_n_envs >= 1, "eval_n_envs", ">= 1")
        check_field(self, self.eval_episodes >= 0, "eval_episodes", ">= 0")
        check_field(self, self.eval_max_steps >= 1, "eval_max_steps", ">= 1")

    @property
    def batch_size(self) -> int:
        """Env steps per sampler batch: ``batch_T * batch_B``."""
        return self.batch_T * self.batch_B


@dataclass(frozen=True)
class RunnerConfig:
    """How long to train, how often to log, evaluate and checkpoint, and on what hardware.

    All intervals are in env steps (not frames, not iterations). A boundary is crossed at the first
    sampler batch that reaches it, so with batches that do not divide the interval, rows land at
    the first multiple of the batch size past each boundary.

    ``checkpoint_replay``: whether checkpoints also hold the replay and the sampler's state (envs,
    agent inputs and recurrent state, running episodes, exploration streams), so that a resumed run
    continues update for update as if it had not stopped (``algorithms.runners.sync``). ``"always"``
    saves them; ``"never"`` leaves them out (a resumed run refills its replay before training again
    and starts fresh episodes); ``"auto"`` saves them unless the replay's arrays exceed 1 GiB
    (``algorithms.resume.AUTO_REPLAY_LIMIT_BYTES``: a MinAtar replay goes in, a 1M-step Atari one,
    ~7 GB, does not), and says so on stderr (the job's log.txt) when it leaves the replay out.
    Env states that cannot be saved (ALE) and the async and DDP runners keep today's resume, said
    once on stderr.
    """

    kind: str = "sync"
    n_steps: int = 100_000
    log_interval_steps: int = 10_000
    eval_interval_steps: int = 0  # 0: evaluate only at the end
    checkpoint_interval_steps: int = 0  # 0: at every log interval
    seed: int = 0
    torch_threads: int = 1
    device: str = "cpu"
    n_gpus: int = 1  # ranks for ddp
    async_param_sync_steps: int = (
        400  # R2D2 (Kapturowski et al. 2019), Table 2: actor parameter update period
    )
    replay_ratio_target: float = 0.0  # async throttle; 0 = off
    replay_ratio_counting: str = "trained"  # which Counters replay ratio the throttle targets
    # CPUs ("0,2-3") of the async runner's sampler process and of its optimizer (the run's own
    # process while it trains); "" = not pinned. Stages on cores of their own do not slow each other.
    async_sampler_cpus: str = ""
    async_optimizer_cpus: str = ""
    tensorboard: bool = False
    checkpoint_replay: str = "auto"

    def __post_init__(self) -> None:
        check_types(self)
        check_field(self, self.kind in RUNNER_KINDS, "kind", f"one of {RUNNER_KINDS}")
        check_field(
            self,
            self.checkpoint_replay in CHECKPOINT_REPLAY,
            "checkpoint_replay",
            f"one of {CHECKPOINT_REPLAY}",
        )
        check_field(self, self.n_steps >= 1, "n_steps", ">= 1")
        check_field(self, self.n_steps <= MAX_ENV_STEPS, "n_steps", f"<= {MAX_ENV_STEPS:.0e}")
        for field in ("log_interval_steps", "eval_interval_steps", "checkpoint_interval_steps"):
            value = getattr(self, field)
            check_field(self, value <= MAX_ENV_STEPS, field, f"<= {MAX_ENV_STEPS:.0e}")
        check_field(self, self.log_interval_steps >= 1, "log_interval_steps", ">= 1")
        check_field(self, self.eval_interval_steps >= 0, "eval_interval_steps", ">= 0")
        check_field(self, self.checkpoint_interval_steps >= 0, "checkpoint_interval_steps", ">= 0")
        check_field(self, 0 <= self.seed <= MAX_SEED, "seed", f"from 0 to {MAX_SEED} (2**32 - 1)")
        check_field(self, self.torch_threads >= 1, "torch_threads", ">= 1")
        check_field(self, bool(_DEVICE.match(self.device)), "device", "'cpu', 'cuda' or 'cuda:<k>'")
        check_field(self, self.n_gpus >= 1, "n_gpus", ">= 1")
        check_field(self, self.async_param_sync_steps >= 1, "async_param_sync_steps", ">= 1")
        check_field(self, self.replay_ratio_target >= 0, "replay_ratio_target", ">= 0")
        check_field(
            self,
            self.replay_ratio_counting in REPLAY_RATIO_COUNTINGS,
            "replay_ratio_counting",
            f"one of {REPLAY_RATIO_COUNTINGS}",
        )
        for field in ("async_sampler_cpus", "async_optimizer_cpus"):
            value = getattr(self, field)
            _check_cpu_list(self, field)
            check_field(self, self.kind == "async" or not value, field, "empty unless kind is 'async'")

    @property
    def checkpoint_every_steps(self) -> int:
        """The effective checkpoint interval (``checkpoint_interval_steps``, or the log interval if 0)."""
        return self.checkpoint_interval_steps or self.log_interval_steps


@dataclass(frozen=True)
class TrainConfig:
    """Everything one run needs: algorithm (registry name or dotted module path) and its config, env,
    sampler, runner."""

    algo: str
    algo_config: Any
    env: Any  # algorithms.envs EnvConfig (Contract 1)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    runner: RunnerConfig = dataclasses.field(default_factory=RunnerConfig)
    # Where values that did not come from a settings file came from: ``{config.json key: {"origin",
    # "source"}}`` as pairs (hashable), e.g. a value given with ``--set`` on the command line
    # (repro/cli.py). Written to config.json only when not empty.
    origins: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.algo, str):
            raise TypeError(f"TrainConfig.algo must be str, got {type(self.algo).__name__} {self.algo!r}")
        expected = registry.config_class(self.algo)  # ValueError naming an unknown algorithm
        if not isinstance(self.algo_config, expected):
            raise TypeError(
                f"TrainConfig.algo_config must be {expected.__module__}.{expected.__name__} for algo "
                f"{self.algo!r}, got {type(self.algo_config).__name__}"
            )
        env_cls = env_config_class()
        if not isinstance(self.env, env_cls):
            raise TypeError(f"TrainConfig.env must be {env_cls.__name__}, got {type(self.env).__name__}")
        if not isinstance(self.sampler, SamplerConfig):
            raise TypeError(f"TrainConfig.sampler must be SamplerConfig, got {type(self.sampler).__name__}")
        if not isinstance(self.runner, RunnerConfig):
            raise TypeError(f"TrainConfig.runner must be RunnerConfig, got {type(self.runner).__name__}")
        if self.runner.kind == "ddp" and self.sampler.mode != "serial":
            raise ValueError(
                "TrainConfig.sampler.mode must be 'serial' with runner.kind 'ddp' "
                f"(one serial sampler per rank), got {self.sampler.mode!r}"
            )
        if self.sampler.env_workers == "threads" and not self.env.native_atari:
            raise ValueError(
                "TrainConfig.sampler.env_workers 'threads' needs envs that step on their own threads "
                f"(env.kind 'atari' with backend 'native'), got kind {self.env.kind!r}, "
                f"backend {self.env.backend!r}"
            )
        if self.runner.kind == "ddp" and getattr(self.algo_config, "target_kl", 0.0) > 0:
            # A KL stop taken on one rank's data lets ranks run different numbers of updates, and a
            # rank waiting in DDP's gradient all-reduce for a peer that stopped would hang.
            raise ValueError(
                f"TrainConfig.algo_config.target_kl={self.algo_config.target_kl} is not supported with "
                "runner.kind 'ddp' (ranks could stop at different epochs); set it to 0"
            )


# --- config.json round trip ----------------------------------------------------------------------


def config_to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain JSON-compatible dict of ``config`` (tuples become lists; ``config_from_dict`` restores them);
    the env's fields are those its kind uses (``algorithms.envs.config.applicable_fields``)."""
    import importlib

    out = {
        "algo": config.algo,
        "algo_config": dataclasses.asdict(config.algo_config),
        "env": importlib.import_module(ENV_CONFIG_MODULE).applicable_fields(config.env),
        "sampler": dataclasses.asdict(config.sampler),
        "runner": dataclasses.asdict(config.runner),
    }
    if config.origins:
        out[ORIGINS_KEY] = {key: {"origin": o, "source": source} for key, o, source in config.origins}
    return out


def _origins_from_dict(data: Any) -> tuple[tuple[str, str, str], ...]:
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("origin"), str) and isinstance(v.get("source"), str)
        for v in data.values()
    ):
        raise ConfigError(f"config.json '{ORIGINS_KEY}': expected {{key: {{origin, source}}}}")
    return tuple((key, v["origin"], v["source"]) for key, v in data.items())


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Inverse of ``config_to_dict``: ``config_from_dict(config_to_dict(c)) == c``, also through JSON.

    Built by ``algorithms.configs.build`` (strict: unknown keys and wrong types are one-line
    ``ConfigError``s naming the key); keys renamed since the file was written are read under their
    new names (``migrate_renamed``), so a run directory from before a rename still loads.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"config.json: expected an object, got {type(data).__name__}")
    known = {"algo", "algo_config", "env", "sampler", "runner", ORIGINS_KEY}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"config.json: unknown key {unknown[0]!r}; known: {sorted(known)}")
    for key in ("algo", "algo_config", "env"):
        if key not in data:
            raise ConfigError(f"config.json: missing key {key!r}")
    algo = data["algo"]
    if not isinstance(algo, str):
        raise ConfigError(f"config.json 'algo': expected a string, got {type(algo).__name__}")

    def part(cls: type, key: str) -> Any:
        values = data.get(key, {})
        if not isinstance(values, dict):
            raise ConfigError(f"config.json '{key}': expected an object, got {type(values).__name__}")
        return build(cls, migrate_renamed(cls, values), f"config.json [{key}]")

    return TrainConfig(
        algo=algo,
        algo_config=part(registry.config_class(algo), "algo_config"),
        env=part(env_config_class(), "env"),
        sampler=part(SamplerConfig, "sampler"),
        runner=part(RunnerConfig, "runner"),
        origins=_origins_from_dict(data[ORIGINS_KEY]) if ORIGINS_KEY in data else (),
    )
