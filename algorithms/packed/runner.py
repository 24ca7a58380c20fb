"""The packed runner: K members of one setting (seeds), trained in lockstep in one process.

Each member is a ``SyncRunner`` built exactly as a single run with its seed builds it (agent,
algorithm, serial sampler, counters, run directory, logger) and keeps its own global RNG state
(Python, numpy, torch), made current whenever the member's own code runs, so a member draws what
its single run would. One iteration::

    for each member: sample a batch (its envs, its agent, its exploration streams), then
                     learner.take: append it to its replay (or PPO: its advantages, its permutations)
    learner.update:  one packed update computation for all members
    for each member: count, log, evaluate and checkpoint at its boundaries (its run directory)

The members' envs step one member after another and their networks act one member at a time: only
the updates are packed. Time: every member's counters get the whole time of each phase (the
sampling phase covers all members' sampling), so a member's steps per second is its progress per
second of the process, what it would report running alone at that rate.

A member whose loss is not finite is marked failed with the message and its diagnostics, and its
run directory closed; the others go on (``learners``). Checkpoints are a single run's
(``SyncRunner.state_dict``, each member's slices copied out of the stacks), so a member can be
continued alone by ``algorithms.train.train``, and a packed run resumes from its members'.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from algorithms.packed.learners import learner_class
from algorithms.runners.sync import SyncRunner

if TYPE_CHECKING:
    from algorithms.counters import Counters
    from algorithms.run_config import TrainConfig
    from algorithms.rundir import RunDir


def _compact(value: Any) -> Any:
    """``value`` with every tensor that views a larger storage (a member's slice of a stack) copied
    out, so a member's checkpoint holds its own tensors only."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if torch.is_tensor(value) and value.untyped_storage().nbytes() > value.nbytes:
        return value.clone()
    return value


class MemberRunner(SyncRunner):
    """A packed run's member: a ``SyncRunner`` whose checkpoint holds its own slices only."""

    def state_dict(self) -> dict[str, Any]:
        return _compact(super().state_dict())


class MemberRng:
    """Each member's global RNG states; ``with rng(k):`` makes member k's current and keeps what it drew."""

    def __init__(self) -> None:
        self.states: dict[int, tuple[Any, Any, torch.Tensor]] = {}

    def capture(self, k: int) -> None:
        self.states[k] = (random.getstate(), np.random.get_state(), torch.get_rng_state())

    @contextmanager
    def __call__(self, k: int) -> Iterator[None]:
        python, numpy_state, torch_state = self.states[k]
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        try:
            yield
        finally:
            self.capture(k)


class PackMismatch(ValueError):
    """The members to continue are at different env steps: they cannot run in lockstep. Each member's
    run directory is a single run's, which ``algorithms.train.train`` continues alone."""


class PackedRunner:
    """Trains ``members`` (built by ``build``) in lockstep; see the module docstring."""

    def __init__(self, members: list[MemberRunner], rng: MemberRng, learner: Any, slots: list[int]) -> None:
        self.members = members
        self.rng = rng
        self.learner = learner
        self.slot = {k: j for j, k in enumerate(slots)}  # member -> its place in the learner's stacks
        self.failures: dict[int, str] = {}

    @classmethod
    def build(
        cls,
        configs: Sequence[TrainConfig],
        runs: Sequence[RunDir],
        checkpoints: Sequence[dict[str, Any] | None],
    ) -> PackedRunner:
        rng = MemberRng()
        members = []
        for k, (config, run, checkpoint) in enumerate(zip(configs, runs, checkpoints)):
            members.append(MemberRunner.build(config, run, checkpoint))
            rng.capture(k)
        n_steps = configs[0].runner.n_steps
        # Only the members still to train are stacked: a complete one's optimizer state may be ahead.
        slots = [k for k, m in enumerate(members) if m.counters.env_steps < n_steps]
        if len({members[k].counters.env_steps for k in slots}) > 1:
            at = ", ".join(f"{m.run_dir.path}: {m.counters.env_steps}" for m in members)
            raise PackMismatch(f"packed members resume at different env steps ({at}); continue them alone")
        learner = learner_class(configs[0].algo)([members[k].algo for k in slots]) if slots else None
        return cls(members, rng, learner, slots)

    def start(self) -> None:
        """Every member's envs and logger, as ``SyncRunner.run`` starts them."""
        for k, member in enumerate(self.members):
            with self.rng(k):
                member.start_sampler()
                seed = member.config.runner.seed
                member.start_logger(f"{member.config.algo} {member.config.env.id} seed {seed}")

    def run(self) -> list[Counters]:
        members, n_steps = self.members, self.members[0].config.runner.n_steps
        self.start()
        try:
            for k, member in enumerate(members):  # members that were complete already
                if member.counters.env_steps >= n_steps:
                    with self.rng(k):
                        member.finish()
            while active := [k for k in self.training() if members[k].counters.env_steps < n_steps]:
                self.iteration(active)
                for k in active:
                    if k in self.failures:
                        self.stop(k)
                    elif members[k].boundary_due() or members[k].counters.env_steps >= n_steps:
                        with self.rng(k):
                            members[k].cross_boundaries()
                            if members[k].counters.env_steps >= n_steps:
                                members[k].finish()
        finally:
            for member in members:
                member.sampler.shutdown()
                if member.logger is not None:
                    member.logger.close()
        return [m.counters for m in members]

    def training(self) -> list[int]:
        return [k for k in range(len(self.members)) if k not in self.failures]

    def iteration(self, active: list[int]) -> None:
        """Every active member samples a batch and hands it to the learner; one packed update; every
        member records its work. Each phase's time counts for every member (module docstring)."""
        members, learner = self.members, self.learner
        itr = members[active[0]].counters.sampler_itrs
        batches, taken = [], []
        sampling = optimizing = 0.0
        for k in active:
            with self.rng(k):
                start = time.perf_counter()
                batches.append(members[k].sample_batch(itr))
                sampled = time.perf_counter()
                members[k].agent.set_mode("train")
                taken.append(learner.take(self.slot[k], members[k].counters.env_steps, batches[-1][0]))
                sampling, optimizing = sampling + sampled - start, optimizing + time.perf_counter() - sampled
        start = time.perf_counter()
        results = learner.update([self.slot[k] for k in active], taken)
        optimizing += time.perf_counter() - start
        for k, (_, traj_infos), (opt_info, failure) in zip(active, batches, results):
            members[k].counters.add_time("sampling", sampling)
            members[k].counters.add_time("optimizing", optimizing)
            members[k].record(traj_infos, opt_info)
            if failure is not None:
                self.failures[k] = failure

    def stop(self, k: int) -> None:
        """Member ``k``'s loss was not finite: its run is marked failed with the diagnostics; the
        others go on."""
        member = self.members[k]
        with self.rng(k):
            member.log_row()
        message = f"packed member seed {member.config.runner.seed}: {self.failures[k]}"
        print(f"{member.run_dir.path}: {message}", file=sys.stderr, flush=True)
        member.run_dir.set_status("failed", message)


def run_members(
    configs: Sequence[TrainConfig], runs: Sequence[RunDir], resume: bool
) -> tuple[list[Counters], dict[int, str]]:
    """Train the opened member runs ``runs`` packed; returns every member's counters and the
    failures by member index."""
    checkpoints = [run.load_checkpoint() if resume else None for run in runs]
    runner = PackedRunner.build(configs, runs, checkpoints)
    return runner.run(), dict(runner.failures)


def member_metadata(configs: Sequence[TrainConfig], k: int) -> dict[str, Any]:
    """What a member's metadata.json records about its pack."""
    return {"packed": {"members": len(configs), "member": k, "seeds": [c.runner.seed for c in configs]}}
