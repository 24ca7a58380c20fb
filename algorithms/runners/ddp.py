"""Synchronous data-parallel training: ``runner.n_gpus`` processes, one replica each, gradients
averaged by ``torch.nn.parallel.DistributedDataParallel`` (rlpyt's SyncRl runner, with ``spawn``).

Each rank is a ``SyncRunner`` with

* its own serial sampler on ``batch_B`` envs, the global env ranks ``[r * B, (r + 1) * B)`` of
  ``n_gpus * B`` (seeded as those ranks of one vector env, see ``algorithms.samplers.base``);
* its own agent and algorithm, built from the run seed on every rank, so all replicas start equal;
  then rank r > 0 reseeds (``rank_seed``) for its own minibatch draws (exploration comes from the
  per-env-rank streams of its global env ranks, ``algorithms.agents.base.RankStreams``);
* the agent's model wrapped in ``DataParallelModel`` (a DDP) *before* the algorithm is built, so
  every backward pass through the model's ``forward`` averages its gradients over the ranks;
  parameters an algorithm trains outside ``agent.model`` (critics of DDPG/TD3/SAC, SAC's
  temperature) have their gradients averaged by ``GradientAverager`` just before each optimizer
  step. Identical gradients and optimizers keep the replicas equal; one update trains on
  ``n_gpus`` times the algorithm's batch;
* its own replay, for replay-based algorithms (filled by its own sampler).

Step accounting over the ranks, identical on every rank (all ranks cross the same boundaries):
env steps per iteration = ``n_gpus * batch_T * batch_B``; episodes = all ranks' episodes;
``updates`` = the updates of one rank (a synchronised update counts once; the runner checks that
every rank made the same number); ``samples_trained`` / ``samples_replayed`` = summed over the
ranks, so the replay ratios stay "samples per env step" of the whole run. Diagnostics in the
progress table are the mean over the ranks.

Rank 0 writes the run directory (progress rows, evaluation, which rank 0 runs alone while the
others wait at the next collective, and checkpoints, which hold every rank's RNG states). After
every iteration the ranks compare a checksum of everything trained and stop with an error if the
replicas differ: a model trained through a method other than ``forward`` (which DDP does not see)
would otherwise drift silently.

Backends: ``nccl`` with ``runner.device`` "cuda" or "cuda:k" (rank r on device k + r), ``gloo`` on
CPU (used by the tests). Rendezvous through a file in a private temporary directory.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook

from algorithms.counters import Counters
from algorithms.learners.common import OptInfo
from algorithms.process import configure_process
from algorithms.rundir import RunDir, rng_state
from algorithms.runners.common import finite_mean
from algorithms.runners.sync import SyncRunner
from algorithms.samplers.base import BaseSampler
from algorithms.samplers.serial import SerialSampler

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.run_config import TrainConfig

# Rank 0 evaluates alone while the other ranks wait in the next collective; a paper-scale Atari
# evaluation can take hours, far past the default 30-minute collective timeout. A rank that dies
# is noticed by the parent's join at once, whatever this timeout.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=12)


class DataParallelModel(DistributedDataParallel):
    """A DDP replica that agents and algorithms can use like the model it wraps.

    Attributes DDP lacks (model methods such as ``value`` or ``initial_state``) come from the
    wrapped model; ``state_dict`` / ``load_state_dict`` are the wrapped model's (no ``module.``
    prefix, so checkpoints and target-network syncs look as in a single-process run); a deep copy
    (a target network) is a copy of the wrapped model, not a second replica. Gradients are averaged
    only through ``forward`` calls (``model(x)``).
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.nn.Module:
        return copy.deepcopy(self.module, memo)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def rank_device(device: str, rank: int) -> str:
    """The device of ``rank``: CPU stays CPU; "cuda" / "cuda:k" become "cuda:<k + rank>"."""
    if device == "cpu":
        return "cpu"
    base = int(device.split(":")[1]) if ":" in device else 0
    return f"cuda:{base + rank}"


def parameter_checksum(params: list[torch.Tensor]) -> tuple[float, float]:
    """(sum, sum of squares) of ``params`` in float64: equal replicas give equal values."""
    values = [p.detach().to(torch.float64) for p in params]
    sums = torch.stack([torch.stack([v.sum(), v.square().sum()]) for v in values]).sum(dim=0).cpu()
    return float(sums[0]), float(sums[1])


class GradientAverager:
    """An optimizer step pre-hook that averages, over the ranks, the gradients of parameters DDP
    does not hold: those an algorithm trains outside ``agent.model`` (the critics of DDPG, TD3 and
    SAC, SAC's temperature). One all-reduce per dtype per optimizer step.

    Unlike DDP's gradients, these are averaged after anything the algorithm does between
    ``backward`` and ``step`` (gradient clipping then acts on each rank's own gradients).
    ``trained`` lists every parameter it has averaged, for the replica check.
    """

    def __init__(self, ddp_params: list[torch.Tensor], world_size: int) -> None:
        self.ddp_params = {id(p) for p in ddp_params}
        self.world_size = world_size
        self.trained: list[torch.Tensor] = []
        self._seen: set[int] = set()

    def __call__(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        params = [
            p
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None and id(p) not in self.ddp_params
        ]
        for dtype in sorted({p.grad.dtype for p in params}, key=str):
            grads = [p.grad for p in params if p.grad.dtype == dtype]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= self.world_size
            for grad, part in zip(grads, flat.split([g.numel() for g in grads])):
                grad.copy_(part.view_as(grad))
        for p in params:
            if id(p) not in self._seen:
                self._seen.add(id(p))
                self.trained.append(p)


class DdpRunner(SyncRunner):
    """One rank of a data-parallel run (see the module docstring)."""

    # Each rank holds its own envs and replay: checkpoints (rank 0's) hold neither.
    saves_run_state = False

    @classmethod
    def prepare_agent(cls, agent: Agent) -> None:
        device = agent.device
        # forward_sync_buffers=False: buffers are synced once at construction, not in every forward,
        # which would make action selection (and rank 0's evaluation) a collective.
        agent.model = DataParallelModel(
            agent.model,
            device_ids=[device] if device.type == "cuda" else None,
            forward_sync_buffers=False,
        )

    @classmethod
    def rng_of_rank(cls, checkpoint: dict[str, Any], rank: int) -> dict[str, Any]:
        return checkpoint["ddp_rng"][rank]

    @classmethod
    def make_sampler(
        cls, config: TrainConfig, agent: Agent, start_env_steps: int, rank: int, world_size: int
    ) -> BaseSampler:
        B = config.sampler.batch_B
        return SerialSampler(
            config.env,
            agent,
            config.sampler,
            config.runner.seed,
            start_env_steps,
            first_rank=rank * B,
            global_batch=world_size * B,
        )

    @classmethod
    def build(
        cls, config: TrainConfig, run: RunDir | None, checkpoint: dict[str, Any] | None, **kwargs: Any
    ) -> DdpRunner:
        runner = super().build(config, run, checkpoint, **kwargs)
        runner.averager = GradientAverager(list(runner.agent.model.parameters()), runner.world_size)
        return runner

    def run(self) -> Counters:
        hook = register_optimizer_step_pre_hook(self.averager)
        try:
            return super().run()
        finally:
            hook.remove()

    def all_gather(self, obj: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def gather(
        self, traj_infos: list[dict[str, Any]], opt_info: OptInfo
    ) -> tuple[list[dict[str, Any]], OptInfo]:
        trained = list(self.agent.model.parameters()) + self.averager.trained
        mine = (traj_infos, opt_info, parameter_checksum(trained))
        everyone = self.all_gather(mine)
        itr = self.counters.sampler_itrs
        updates = [info.updates for _, info, _ in everyone]
        if len(set(updates)) > 1:
            raise RuntimeError(
                f"DDP: ranks made different numbers of updates in iteration {itr}: {updates}; every rank "
                "must make the same number of backward passes per optimize call"
            )
        checksums = [checksum for _, _, checksum in everyone]
        if len(set(checksums)) > 1:
            raise RuntimeError(
                f"DDP: parameters differ across ranks after iteration {itr}; algorithm "
                f"{self.config.algo!r} must train agent.model through model.forward (DDP averages "
                "only those gradients) and everything else through an optimizer"
            )
        diagnostics = {
            key: finite_mean([info.diagnostics.get(key, math.nan) for _, info, _ in everyone])
            for key in opt_info.diagnostics
        }
        total = OptInfo(
            updates=updates[0],
            samples_trained=sum(info.samples_trained for _, info, _ in everyone),
            samples_replayed=sum(info.samples_replayed for _, info, _ in everyone),
            diagnostics=diagnostics,
        )
        return [t for trajs, _, _ in everyone for t in trajs], total

    def save_checkpoint(self) -> None:
        rngs = self.all_gather(rng_state())
        if self.run_dir is None:
            return
        with self.counters.timer("logging"):
            self.run_dir.save_checkpoint({**self.state_dict(), "ddp_rng": rngs})


def _rank_main(
    rank: int, config: TrainConfig, run: RunDir, checkpoint_path: Path | None, init_file: str
) -> None:
    """Entry point of rank ``rank`` in its spawned process."""
    runner_config = config.runner
    world_size = runner_config.n_gpus
    configure_process(runner_config.torch_threads)
    device = rank_device(runner_config.device, rank)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.startswith("cuda") else "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world_size,
        timeout=COLLECTIVE_TIMEOUT,
    )
    try:
        checkpoint = (
            None
            if checkpoint_path is None
            else torch.load(checkpoint_path, weights_only=True, map_location="cpu")
        )
        runner = DdpRunner.build(
            config,
            run if rank == 0 else None,
            checkpoint,
            rank=rank,
            world_size=world_size,
            device=device,
        )
        runner.run()
    finally:
        dist.destroy_process_group()
    exit_rank()


def exit_rank() -> NoReturn:
    """End a rank process that finished its work, without interpreter finalization.

    There, about one CPU run in 8 of two gloo ranks aborted ("terminate called without an active
    exception", no Python frame on any thread) after the process group was destroyed and every file
    closed; leaving with ``os._exit`` skips the teardown that races. Call it last, after
    ``destroy_process_group``: nothing after it runs.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(config: TrainConfig, run_dir: RunDir, resume: bool) -> Counters:
    """Train ``config`` on ``runner.n_gpus`` data-parallel ranks; returns the run's final counters."""
    world_size = config.runner.n_gpus
    if config.runner.device != "cpu" and torch.cuda.device_count() < world_size:
        raise ValueError(
            f"RunnerConfig.n_gpus is {world_size} but {torch.cuda.device_count()} CUDA devices are visible"
        )
    checkpoint_path = run_dir.checkpoint_path if resume and run_dir.checkpoint_path.exists() else None
    rendezvous = Path(tempfile.mkdtemp(prefix="ddp-rendezvous-"))
    try:
        mp.start_processes(
            _rank_main,
            args=(config, run_dir, checkpoint_path, str(rendezvous / "store")),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
    finally:
        shutil.rmtree(rendezvous, ignore_errors=True)
    return Counters.from_state_dict(run_dir.load_checkpoint()["counters"])
