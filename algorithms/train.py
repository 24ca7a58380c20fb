"""The training entry point, ``train()`` (docs/ARCHITECTURE.md, Contract 6); the typed configs it takes
are ``algorithms.run_config``'s.

``repro`` builds a ``TrainConfig`` and calls ``train(config, run_dir)``; nothing else is needed to
run any algorithm under any runner.

Seeding rule (the same for every runner and sampler mode):

* the runner seeds Python's ``random``, numpy's global RNG and torch from ``runner.seed``
  (``algorithms.runners.sync.seed_everything``) before the agent is built, so model
  initialisation and everything drawn from the global RNGs are functions of the seed; DDP rank
  r > 0 uses an independent seed derived from (seed, r) (``rank_seed``); a resumed run restores
  the RNG states saved in its checkpoint instead;
* environments are seeded by the samplers from the run seed and each env's global rank
  (``algorithms.samplers.seeding.env_seed``), never from the global RNGs, so sampler modes that
  split the B environments across workers see the same episodes as the serial sampler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from algorithms.configs import ConfigError
from algorithms.run_config import TrainConfig, config_from_dict, config_to_dict

if TYPE_CHECKING:
    from algorithms.counters import Counters
    from algorithms.rundir import RunDir

# runner kind -> "module:function" with signature (config, run: RunDir, resume) -> Counters.
RUNNERS: dict[str, str] = {
    "sync": "algorithms.runners.sync:run",
    "async": "algorithms.runners.async_:run",
    "ddp": "algorithms.runners.ddp:run",
}


def train(config: TrainConfig, run_dir: Path | str, resume: bool = True) -> Counters:
    """Train ``config`` into ``run_dir`` (Contract 5 layout) and return the final counters.

    With ``resume`` and an existing run directory, the stored config must equal ``config``
    (``RunDir.open`` names the first difference) and training continues from the latest
    checkpoint that loads, the tables cut back to it (``RunDir.recover``, which prints one line
    to stderr when it had to repair something); a run that already finished returns at once with
    its counters. Without ``resume``, an existing run directory is an error. The run directory is
    locked for the whole call (``RunBusy`` when another process writes it). ``status.json`` ends
    as ``complete``, ``interrupted`` on Ctrl-C (``KeyboardInterrupt``, re-raised), or ``failed``
    with the error (re-raised).
    """
    import importlib

    from algorithms.process import configure_process

    if not isinstance(config, TrainConfig):
        raise TypeError(f"train: config must be a TrainConfig, got {type(config).__name__}")
    configure_process(config.runner.torch_threads)
    run = open_run(config, run_dir, resume)
    module, function = RUNNERS[config.runner.kind].split(":")
    try:
        counters = getattr(importlib.import_module(module), function)(config, run, resume)
        run.set_status("complete")
        return counters
    except KeyboardInterrupt:
        run.set_status("interrupted", INTERRUPTED)
        raise
    except BaseException as error:
        run.set_status("failed", f"{type(error).__name__}: {error}")
        raise
    finally:
        run.close()


INTERRUPTED = "stopped by Ctrl-C or a stop signal; rerun to continue"


def config_changes(stored: dict[str, Any], config: TrainConfig, ignore: tuple[str, ...] = ()) -> list[str]:
    """Every key at which a run directory's ``stored`` config differs from ``config`` (with both
    values), the stored one read as today's (``_stored_config_today``), keys in
    ``RESULT_NEUTRAL_KEYS`` (``algorithms.rundir``) and ``ignore`` left out: what resuming ``config``
    there would refuse."""
    from algorithms.rundir import RESULT_NEUTRAL_KEYS, config_differences
    from algorithms.rundir.atomic import _json_default

    fresh = json.loads(json.dumps(config_to_dict(config), default=_json_default))
    today = json.loads(json.dumps(_stored_config_today(stored), default=_json_default))
    return list(config_differences(today, fresh, RESULT_NEUTRAL_KEYS + ignore))


def _stored_config_today(stored: dict[str, Any]) -> dict[str, Any]:
    """A run directory's stored config as ``config_to_dict`` writes it today: keys renamed since under
    their new names, fields added since at their defaults (a run from before either resumes). A
    stored config that does not build is compared as it is, so the difference is named."""
    try:
        return config_to_dict(config_from_dict(stored))
    except (ConfigError, TypeError, ValueError):
        return stored


def open_run(
    config: TrainConfig, run_dir: Path | str, resume: bool, extra_metadata: dict[str, Any] | None = None
) -> RunDir:
    """``config``'s run directory, opened and locked (``RunDir.open``) and cut back to its latest
    checkpoint that loads (``RunDir.recover``, reported on stderr when it repaired something); a
    start of a run that existed is added to its metadata.json's resumes (``RunDir.note_resume``)."""
    from algorithms.rundir import RESULT_NEUTRAL_KEYS, RunDir, declared_effective_values

    run = RunDir.open(
        Path(run_dir),
        config_to_dict(config),
        {"seed": config.runner.seed},
        resume=resume,
        effective_values=declared_effective_values("algo_config", config.algo_config),
        extra_metadata=extra_metadata,
        read_stored=_stored_config_today,
        ignore=RESULT_NEUTRAL_KEYS,
    )
    try:
        checkpoint, repaired = run.recover()
        if run.reopened:
            run.note_resume(int(checkpoint["counters"]["env_steps"]) if checkpoint is not None else 0)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            run.set_status("interrupted", INTERRUPTED)
        else:
            run.set_status("failed", f"{type(error).__name__}: {error}")
        run.close()
        raise
    if repaired is not None:
        print(f"{run.path}: {repaired}", file=sys.stderr, flush=True)
    elif checkpoint is not None:  # into the run's log.txt, where analysis/interruptions.py reads it
        steps = int(checkpoint["counters"]["env_steps"])
        print(f"{run.path}: resumed from its checkpoint at {steps:,} env steps", file=sys.stderr, flush=True)
    return run
