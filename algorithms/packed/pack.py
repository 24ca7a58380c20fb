"""A packed run's entry (``train_packed``, ``algorithms.train.train`` for a pack) and the check of
which configs can share a process (``check_packable``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from algorithms.packed.learners import learner_class
from algorithms.packed.runner import PackMismatch, member_metadata, run_members

if TYPE_CHECKING:
    from algorithms.counters import Counters
    from algorithms.run_config import TrainConfig


def check_packable(configs: Sequence[TrainConfig]) -> None:
    """``ValueError`` naming why ``configs`` cannot train as one pack: they must be ``TrainConfig``s
    equal except ``runner.seed`` and ``env.id`` (envs with the same observation and action spaces;
    each (env, seed) once), of an algorithm with a packed learner, with the serial sampler and the
    synchronous runner (PPO: feed-forward, ``target_kl = 0``)."""
    from algorithms.run_config import TrainConfig

    if not configs:
        raise ValueError("packing: no configs")
    for config in configs:
        if not isinstance(config, TrainConfig):
            raise TypeError(f"packing: expected TrainConfig, got {type(config).__name__}")
    first = configs[0]

    def setting(config: TrainConfig) -> TrainConfig:
        """What the members share: everything but the seed and the env id."""
        env = dataclasses.replace(config.env, id=first.env.id)
        return dataclasses.replace(config, env=env, runner=dataclasses.replace(config.runner, seed=0))

    for config in configs[1:]:
        if setting(config) != setting(first):
            raise ValueError(
                f"packing: the config of {config.env.id} seed {config.runner.seed} differs from that of "
                f"{first.env.id} seed {first.runner.seed} in more than the seed and the env id; a pack is "
                "one setting"
            )
    members = [(c.env.id, c.runner.seed) for c in configs]
    if len(set(members)) != len(members):
        raise ValueError(f"packing: members {members} repeat; each (env, seed) trains once")
    if len({c.env.id for c in configs}) > 1:
        _check_same_spaces(configs)
    learner_class(first.algo)
    if first.runner.kind != "sync":
        raise ValueError(f"packing: runner.kind must be 'sync', got {first.runner.kind!r}")
    if first.sampler.mode != "serial":
        raise ValueError(f"packing: sampler.mode must be 'serial', got {first.sampler.mode!r}")
    algo_config = first.algo_config
    if getattr(algo_config, "recurrent", False):
        raise ValueError("packing: a recurrent PPO policy cannot be packed (its LSTM runs packed sequences)")
    if getattr(algo_config, "target_kl", 0.0) > 0:
        raise ValueError(
            f"packing: algo_config.target_kl={algo_config.target_kl}: the KL stop would end members' epochs "
            "at different minibatches; set it to 0"
        )


def _check_same_spaces(configs: Sequence[TrainConfig]) -> None:
    """Members on different envs stack one network: their observation and action spaces must agree."""
    from algorithms.samplers.base import env_spaces

    spaces = {}
    for config in configs:
        if config.env.id not in spaces:
            observation, action = env_spaces(config.env)
            spaces[config.env.id] = (observation.shape, str(observation.dtype), repr(action))
    first, *others = spaces.items()
    for env_id, found in others:
        if found != first[1]:
            raise ValueError(
                f"packing: {env_id} has observation shape, dtype and action space {found}, {first[0]} has "
                f"{first[1]}; envs in one pack need the same"
            )


def train_packed(
    configs: Sequence[TrainConfig], run_dirs: Sequence[Path | str], resume: bool = True
) -> list[Counters]:
    """Train ``configs`` (one setting, several seeds) in this process, member k into ``run_dirs[k]``.

    Each run directory is written as ``algorithms.train.train`` writes it (metadata.json also
    records the pack). With ``resume``, members continue from their own checkpoints and members
    already complete only finish; ``PackMismatch`` when the members to continue are at different
    env steps (each can then be continued alone with ``train``). A member whose loss turns non-finite
    is marked failed and the others finish; then ``RuntimeError`` names the failed members.
    """
    from algorithms.process import configure_process
    from algorithms.train import INTERRUPTED, open_run

    check_packable(configs)
    if len(run_dirs) != len(configs):
        raise ValueError(f"train_packed: {len(configs)} configs but {len(run_dirs)} run directories")
    configure_process(configs[0].runner.torch_threads)
    runs = []
    failures: dict[int, str] = {}
    try:
        for k, (config, path) in enumerate(zip(configs, run_dirs)):
            runs.append(open_run(config, path, resume, member_metadata(configs, k)))
        counters, failures = run_members(configs, runs, resume)
        for k, run in enumerate(runs):
            if k not in failures:
                run.set_status("complete")
    except PackMismatch as error:
        for run in runs:
            run.set_status("interrupted", str(error))
        raise
    except KeyboardInterrupt:
        for k, run in enumerate(runs):
            if k not in failures:
                run.set_status("interrupted", INTERRUPTED)
        raise
    except BaseException as error:
        for k, run in enumerate(runs):
            if k not in failures:
                run.set_status("failed", f"{type(error).__name__}: {error}")
        raise
    finally:
        for run in runs:
            run.close()
    if failures:
        failed = ", ".join(f"seed {configs[k].runner.seed}" for k in sorted(failures))
        raise RuntimeError(f"packed members failed ({failed}): see their status.json")
    return counters
