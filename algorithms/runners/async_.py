"""The asynchronous runner: sampling and optimization in separate processes, joined through shared
memory, with the replay ratio throttled to a target.

Layout (rlpyt's async mode, rlpyt/runners/async_rl.py; R2D2's actors and learner, Kapturowski et
al. 2019, Sec. 2.3)::

    sampler process                     this process
    ---------------                     ------------
    sampler (any mode) -> DoubleBuffer -> copier thread: algo.append_samples(batch)  [replay write lock]
          ^                                main thread:   algo.learn(1)                [replay read lock]
          |                                               logging, evaluation, checkpoints
          +------ SharedStateDict <------- parameters, pushed every async_param_sync_steps env steps

* The sampler process runs the configured sampler (serial, or a parallel mode whose workers it
  starts itself) with its own agent copy, and writes each [T, B] batch into the free slot of a
  shared-memory ``DoubleBuffer``: it never waits for the optimizer's lock, only when the optimizer
  has fallen a whole buffer behind (or the throttle below holds it back).
* A copier thread here moves each batch from its slot into the algorithm's replay under the write
  side of an ``RWLock`` and frees the slot; the main thread trains one update at a time under the
  read side, so an append never interleaves with a minibatch being drawn or priorities updated.
* Parameters: the learner pushes its ``state_dict`` to a ``SharedStateDict`` each time the sampler
  has advanced ``RunnerConfig.async_param_sync_steps`` env steps (R2D2, Table 2: actors fetch every
  400 steps); the sampler loads the newest version before its next batch.
* Throttle, with ``replay_ratio_target`` = r > 0 under ``replay_ratio_counting`` ("trained":
  ``OptInfo.samples_trained``, R2D2's counting; "with_burnin": ``samples_replayed``, rlpyt's): from
  the env step L that ends the algorithm's warm-up (the env steps up to the batch whose append made
  the replay ``warm``, however far the sampler had run ahead of the optimizer by then, so that the
  number of updates does not depend on the machine's load; a resumed run, whose replay starts empty,
  moves L back by the samples its checkpoint had counted, C / r, so that it owes what it had plus r
  per env step after its new warm-up), the optimizer
  trains while ``counted < r (env_steps - L)`` and otherwise waits for data, and the sampler waits
  while ``counted < r (env_steps_sampled - L) - r T B - u``, with u the samples one update counts:
  more than one batch and one update ahead. Without u, an algorithm whose update counts more than
  a batch's share (R2D1 at ratio 0.8: 320 trained steps per update, 256 owed per batch of 320)
  would make the two stages take turns instead of overlapping. The counters
  report the achieved ratio over all env steps, warm-up included. With r = 0 the optimizer trains
  as fast as it can and the ratio is whatever results (R2D2's learner).

Algorithms (Contract 4): one that implements the async extension, ``append_samples(samples)``
(add a batch to its replay, count its env steps, no training), ``learn(n_updates) ->
OptInfo`` (that many updates from the replay, or none while still warming up), ``warm``
(whether the replay holds enough to train from) and ``diagnostic_keys`` (the progress columns its
diagnostics fill: a row can be due before ``learn``'s first call), runs as drawn
above, throttled. Any other algorithm runs with ``optimize(env_steps, batch)`` called here on each batch
as it arrives (the copier hands over a copy and frees the slot): sampling still overlaps
optimization and parameters still follow every ``async_param_sync_steps``, but the replay ratio is
the algorithm's own, so a ``replay_ratio_target`` is an error for it. The replay itself stays in
this process: its storage is the algorithm's, unchanged.

Time accounting: training counts as "optimizing", waiting for samples as "sampling", so
throughput (env steps per sampling + optimizing second) is the wall-clock rate outside evaluation
and logging.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from algorithms.arrays import BatchSpec, buffer_from_example
from algorithms.cpus import parse_cpus, pin_thread, pinned
from algorithms.learners.common import OptInfo
from algorithms.replay.shared import DoubleBuffer, RWLock
from algorithms.runners.sync import SyncRunner
from algorithms.samplers.modes import make_sampler
from algorithms.samplers.parallel_cpu import bootstrap_example
from algorithms.samplers.serial import SerialSampler
from algorithms.samplers.stepper import allocate_samples, record_example
from algorithms.samplers.workers import SharedStateDict, WorkerError, WorkerGroup, spawn_context

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.counters import Counters
    from algorithms.run_config import TrainConfig
    from algorithms.rundir import RunDir

# Slots of the shared progress array (float64): written by one side each.
_SAMPLED, _COUNTED, _LEARN_START, _PER_UPDATE = 0, 1, 2, 3
_WAIT_S = 0.002  # granularity of the throttle waits
DATA_TIMEOUT_S = 600.0  # no batch from the sampler for this long: report it instead of hanging


def trains_from_replay(algo: Any) -> bool:
    """Whether ``algo`` implements the async extension (``append_samples``, ``learn``, ``warm`` and
    ``diagnostic_keys``)."""
    methods = all(callable(getattr(algo, m, None)) for m in ("append_samples", "learn"))
    return methods and hasattr(algo, "warm") and hasattr(algo, "diagnostic_keys")


def check_async_algo(algo: Any, name: str, replay_ratio_target: float) -> None:
    """``TypeError`` naming what ``algo`` lacks for a throttled asynchronous run."""
    if replay_ratio_target > 0 and not trains_from_replay(algo):
        raise TypeError(
            f"RunnerConfig.replay_ratio_target {replay_ratio_target} needs an algorithm that trains "
            f"from its replay apart from appending; {name!r} lacks append_samples(samples), "
            "learn(n_updates), warm or diagnostic_keys (Contract 4, async extension)"
        )


class _Stopped(Exception):
    """Raised inside waits when the run is being stopped."""


@dataclass(frozen=True)
class SamplerProcessSpec:
    """What the sampler process needs, picklable for ``spawn``; calling it builds the process's body."""

    config: Any  # TrainConfig
    agent_factory: Any
    start_env_steps: int
    batch: DoubleBuffer
    traj_infos: Any  # multiprocessing Queue of per-batch episode lists
    params: SharedStateDict
    progress: Any  # shared float64 array, slots above
    stop: Any  # multiprocessing Event

    def __call__(self) -> SamplerProcess:
        return SamplerProcess(self)


class SamplerProcess:
    """Inside the sampler process: an agent copy and a sampler of the configured mode."""

    def __init__(self, spec: SamplerProcessSpec) -> None:
        config = spec.config
        self.spec = spec
        self.parent_pid = os.getppid()
        # Before the sampler starts its env threads, so that they inherit the CPUs.
        pin_thread(parse_cpus(config.runner.async_sampler_cpus), "RunnerConfig.async_sampler_cpus")
        torch.manual_seed(int(np.random.SeedSequence([config.runner.seed, 1]).generate_state(1)[0]))
        self.agent: Agent = spec.agent_factory()
        if config.sampler.mode in ("gpu", "alternating"):
            self.agent.model.to(config.runner.device)  # these modes batch inference here, on the device
        self.params_version = spec.params.pull(self.agent, -1)
        self.sampler = make_sampler(
            config.sampler.mode,
            config.env,
            self.agent,
            config.sampler,
            config.runner.seed,
            spec.start_env_steps,
            agent_factory=spec.agent_factory,
        )
        self.sampler.initialize()

    def run(self) -> int:
        """Sample until the step budget is reached or the run stops; returns the env steps sampled."""
        spec, runner = self.spec, self.spec.config.runner
        batch_size = self.sampler.batch_spec.size
        env_steps = self.spec.start_env_steps
        itr = 0
        while env_steps < runner.n_steps:
            try:
                self._check_stop()
                self._wait_for_optimizer(env_steps, batch_size)
            except _Stopped:
                break
            self.params_version = spec.params.pull(self.agent, self.params_version)
            self.agent.set_mode("sample", env_steps)
            samples, traj_infos = self.sampler.sample(itr)
            try:
                slot = spec.batch.begin_write(timeout_s=DATA_TIMEOUT_S, alive=self._check_stop)
            except _Stopped:
                break
            spec.batch.slots[slot][:] = samples
            spec.traj_infos.put(traj_infos)
            env_steps += batch_size
            itr += 1
            spec.progress[_SAMPLED] = env_steps
            spec.batch.end_write(slot, (itr, batch_size))
        return env_steps

    def _check_stop(self) -> None:
        # A parent that died without stopping us (SIGKILL) leaves us reparented: stop too.
        if self.spec.stop.is_set() or os.getppid() != self.parent_pid:
            raise _Stopped

    def _wait_for_optimizer(self, env_steps: int, batch_size: int) -> None:
        """The sampler side of the throttle: hold while the optimizer is more than a batch behind."""
        target = self.spec.config.runner.replay_ratio_target
        progress = self.spec.progress
        while target > 0 and not math.isnan(progress[_LEARN_START]):
            owed = target * (env_steps - progress[_LEARN_START]) - target * batch_size - progress[_PER_UPDATE]
            if progress[_COUNTED] >= owed:
                return
            self._check_stop()
            time.sleep(_WAIT_S)

    def close(self) -> None:
        self.sampler.shutdown()


class AsyncRunner(SyncRunner):
    """Runs one job with the sampler in its own process (see the module docstring).

    Logging, evaluation (in this process, with the learner's agent on separate envs) and
    checkpoints are the synchronous runner's.
    """

    # The sampler's envs live in another process and the replay is written by another thread:
    # checkpoints hold neither, and a resume refills the replay and starts fresh episodes.
    saves_run_state = False

    @classmethod
    def make_sampler(
        cls, config: TrainConfig, agent: Agent, start_env_steps: int, rank: int, world_size: int
    ) -> SerialSampler:
        """The sampler *object of this process*, used for evaluation only (training samples come from
        the sampler process); ``BaseSampler.evaluate`` is the same in every mode."""
        return SerialSampler(config.env, agent, config.sampler, config.runner.seed, start_env_steps)

    def run(self) -> Counters:
        config, runner = self.config, self.config.runner
        check_async_algo(self.algo, config.algo, runner.replay_ratio_target)
        self.split = trains_from_replay(self.algo)
        ctx = spawn_context()
        batch_spec = BatchSpec(config.sampler.batch_T, config.sampler.batch_B)
        example = record_example(self.agent.observation_space, self.agent.action_space, self.agent)
        layout = allocate_samples(example, batch_spec).replace(
            bootstrap=buffer_from_example(bootstrap_example(example, self.agent), batch_spec.B).to_torch()
        )
        self.batch = DoubleBuffer(layout)
        self.traj_queue = ctx.Queue()
        self.params = SharedStateDict(self.agent.state_dict())
        # A resumed run starts from its checkpoint's counts: the sampler's throttle must see the
        # samples already counted, as the optimizer does (``counted``), or each waits for the other.
        # L is NaN until the replay is warm (a resumed run's L may be below 0).
        self.counted_at_start = self.counted()
        self.progress = ctx.Array(
            "d", [self.counters.env_steps, self.counted_at_start, math.nan, 0.0], lock=False
        )
        self.stop = ctx.Event()
        self.replay_lock = RWLock()
        # (env steps, episodes, the batch itself for algorithms without the async extension). Such
        # copies wait here one at a time: a slow optimize holds the copier back, and the sampler
        # once both shared slots are full (at most four batches ahead).
        # (env steps, finished episodes, batch for ``optimize`` or None, replay warm after the append)
        self.arrivals: queue.Queue[tuple[int, list[dict[str, Any]], Any, bool]] = queue.Queue(
            maxsize=0 if self.split else 1
        )
        self.next_push = self.counters.env_steps + runner.async_param_sync_steps
        self.arrived = threading.Event()
        self.copier_error: BaseException | None = None
        from algorithms import registry

        spec = SamplerProcessSpec(
            config=config,
            agent_factory=registry.AgentFactory(
                config.algo, config.algo_config, self.agent.observation_space, self.agent.action_space
            ),
            start_env_steps=self.counters.env_steps,
            batch=self.batch,
            traj_infos=self.traj_queue,
            params=self.params,
            progress=self.progress,
            stop=self.stop,
        )
        self.workers = WorkerGroup("async sampler", [spec], torch_threads=runner.torch_threads, daemon=False)
        copier = threading.Thread(target=self._copy_batches, name="replay copier", daemon=True)
        optimizer_cpus = parse_cpus(runner.async_optimizer_cpus)
        self.start_logger()
        try:
            self.workers.send("run")
            with pinned(optimizer_cpus, "RunnerConfig.async_optimizer_cpus"):
                copier.start()  # the copier feeds the replay: it shares the optimizer's CPUs
                self.optimize_until_done()
                self.finish()
        finally:
            self.stop.set()
            copier.join(timeout=10)
            if self.workers.busy:
                # Let the sampler see the stop and return, so it shuts its own workers down cleanly.
                try:
                    self.workers.receive(timeout_s=30)
                except WorkerError:
                    pass  # already failed: the error being raised says why
            self.workers.close()
            self.sampler.shutdown()
            if self.logger is not None:
                self.logger.close()
        return self.counters

    # --- the copier thread ------------------------------------------------------------------------
    def _copy_batches(self) -> None:
        """Move each batch out of its shared slot, then free the slot: into the replay under the
        write lock, or as a copy for ``optimize`` (algorithms without the async extension)."""
        try:
            while True:
                slot, (_, n_steps) = self.batch.begin_read(
                    timeout_s=DATA_TIMEOUT_S, alive=self._sampler_alive
                )
                traj_infos = self._episodes_of_batch()
                batch, warm = None, False
                if self.split:
                    with self.replay_lock.write():
                        self.algo.append_samples(self.batch.slots[slot])
                        warm = self.algo.warm
                else:
                    batch = self.batch.slots[slot].map(torch.clone)
                self.batch.end_read(slot)
                while True:
                    try:
                        self.arrivals.put((n_steps, traj_infos, batch, warm), timeout=0.05)
                        break
                    except queue.Full:
                        self._sampler_alive()
                self.arrived.set()
        except _Stopped:
            return
        except BaseException as error:
            self.copier_error = error
            self.arrived.set()

    def _episodes_of_batch(self) -> list[dict[str, Any]]:
        """The finished episodes the sampler queued with the batch just read. A queue's data travels
        through a feeder thread of the sender, after the batch's slot is already marked written: a
        sampler killed in between never delivers them, so wait in short polls that check it lives."""
        deadline = time.monotonic() + DATA_TIMEOUT_S
        while True:
            try:
                return self.traj_queue.get(timeout=0.05)
            except queue.Empty:
                self._sampler_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no episodes from the sampler for {DATA_TIMEOUT_S:.0f} s") from None

    def _sampler_alive(self) -> None:
        if self.stop.is_set():
            raise _Stopped
        if self.workers.dead_worker() is not None:
            raise WorkerError(self.workers.dead_worker())

    # --- the main thread --------------------------------------------------------------------------
    def optimize_until_done(self) -> None:
        """Train (algorithms with the async extension) or optimize each arriving batch (the others)
        until the step budget is sampled and, with a target, the replay ratio has caught up."""
        runner = self.config.runner
        target = runner.replay_ratio_target
        counters = self.counters
        data_since_idle = True  # new data arrived since learn() last did no update
        while True:
            if self.take_arrivals():
                data_since_idle = True
            steps = counters.env_steps
            sampling_done = steps >= runner.n_steps
            learn_start = self.progress[_LEARN_START]
            if target > 0 and not math.isnan(learn_start):
                behind = self.counted() < target * (steps - learn_start)
            elif target > 0:
                # Not warm yet: a try on each arrival makes no update but reports the algorithm's
                # diagnostics (NaN), whose keys the progress rows from the first one on must have.
                behind = True
            else:
                behind = not sampling_done  # no throttle: train whenever there is data
            if self.split and behind and data_since_idle:
                with counters.timer("optimizing"), self.replay_lock.read():
                    # Warm while L is still NaN: the copier has appended the batch that made the
                    # replay warm and not yet handed it over. Updates now would escape the throttle;
                    # that arrival sets L, so wait for it.
                    handing_over = target > 0 and math.isnan(learn_start) and self.algo.warm
                    if not handing_over:
                        self.agent.set_mode("train")
                        opt_info = self.algo.learn(1)
                if handing_over:
                    data_since_idle = False
                    continue
                self.add_opt_info(opt_info)
                if opt_info.updates == 0:
                    data_since_idle = False  # still warming up: wait for more data
                continue
            if sampling_done:
                return
            with counters.timer("sampling"):
                if self.arrived.wait(timeout=0.05):
                    data_since_idle = True
            self.check_sampler()

    def add_opt_info(self, opt_info: OptInfo) -> None:
        """Count an optimizer call's work, share it with the sampler's throttle, push parameters if due."""
        before = self.counted()
        self.counters.add_updates(opt_info.updates, opt_info.samples_trained, opt_info.samples_replayed)
        self.window.add([], opt_info)
        self.progress[_COUNTED] = self.counted()
        if opt_info.updates > 0:
            self.progress[_PER_UPDATE] = (self.progress[_COUNTED] - before) / opt_info.updates
        if self.progress[_SAMPLED] >= self.next_push:
            self.params.push(self.agent.state_dict())
            self.next_push = self.progress[_SAMPLED] + self.config.runner.async_param_sync_steps

    def counted(self) -> int:
        c = self.counters
        return (
            c.samples_trained if self.config.runner.replay_ratio_counting == "trained" else c.samples_replayed
        )

    def take_arrivals(self) -> int:
        """Count the batches the copier has handed over (returns how many), optimizing on each for
        algorithms without the async extension, and cross log, evaluation and checkpoint boundaries."""
        self.check_sampler()
        taken = 0
        while True:
            try:
                n_steps, traj_infos, batch, warm = self.arrivals.get_nowait()
            except queue.Empty:
                return taken
            taken += 1
            self.arrived.clear()
            if batch is not None:
                with self.counters.timer("optimizing"):
                    self.agent.set_mode("train")
                    opt_info = self.algo.optimize(self.counters.env_steps, batch)
                self.add_opt_info(opt_info)
            self.counters.add_env_steps(n_steps, episodes=len(traj_infos))
            if warm and math.isnan(self.progress[_LEARN_START]):
                target = self.config.runner.replay_ratio_target
                resumed = self.counted_at_start / target if target > 0 else 0.0
                self.progress[_LEARN_START] = self.counters.env_steps - resumed
            self.window.traj_infos.extend(traj_infos)
            if self.logger is not None:
                self.logger.advance(self.counters.env_steps)
            self.cross_boundaries()

    def check_sampler(self) -> None:
        """Re-raise a failure of the copier thread or the sampler process (with the sampler's traceback)."""
        if self.copier_error is None:
            return
        if isinstance(self.copier_error, WorkerError):
            self.workers.receive(timeout_s=5)  # raises the sampler's own error report if it sent one
        raise self.copier_error

    def finish(self) -> None:
        """Wait for the sampler to report its end, then the last progress row, evaluation and checkpoint."""
        self.workers.receive(timeout_s=60)
        self.take_arrivals()
        super().finish()

    def save_checkpoint(self) -> None:
        with self.replay_lock.read():  # the algorithm's counters, consistent with its replay
            super().save_checkpoint()

    def start_logger(self, description: str = "") -> None:
        super().start_logger(description or f"{self.config.algo} {self.config.env.id} (async)")


def run(config: TrainConfig, run_dir: RunDir, resume: bool) -> Counters:
    """Train ``config`` with the sampler in its own process, writing ``run_dir``."""
    checkpoint = run_dir.load_checkpoint() if resume else None
    return AsyncRunner.build(config, run_dir, checkpoint).run()
