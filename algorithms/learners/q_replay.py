"""Q-learning from replay: the learner DQN (C51, Rainbow) and R2D1 share, and its update loop for
single and packed runs (``replay_updates``).

An algorithm's loss is a function of its inputs only (``LossFn``):
``loss(config, model, target_model, batch, mode) -> LossOut``. What a caller may choose (whether
to measure the diagnostics, whether the loss runs under a ``torch.func`` transform, where R2D1's
time limits are) comes in ``mode``, a ``LossMode`` built outside the loss by the learner's
``loss_mode``; nothing is read from the learner. A single run and a packed one call the same loss:
the single run with the online and target networks as modules (``SingleGradStep``), the packed run
with them as functions of one member's slice of the stacked parameters, under
``vmap(grad(...))`` (``algorithms.packed.learners``).

One update: every member draws a minibatch from its own replay; the gradient step computes the
loss's gradient and takes one clipped optimizer step (``GradStep``); each member writes the new
priorities of the items it drew and counts the update; every ``target_update_period_updates``
updates the target network becomes a copy of the online one.

The loss is read on every update; the other diagnostics (the loss's own, ``grad_norm``) are measured
on every ``diagnostic_period``-th update of the run, as CleanRL logs its losses at intervals: on Young
& Tian's MinAtar network they cost 4% of a DQN job's step (``q_mean``, ``td_abs_mean`` and the
gradient norm with clipping off; docs/results/bench_minatar.md). A progress row's mean of them is
then a mean over every tenth of its updates (R2D1 measures every update: ``diagnostic_period``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch

from algorithms.agents.base import Agent
from algorithms.arrays import BatchSpec, NamedArrays, to_torch
from algorithms.learners.common import OptInfo, adam, nonfinite_loss
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import observations_for
from algorithms.resume import tree_from_state, tree_state

# One member's replay draw: (minibatch, drawn items, importance-sampling weights).
Draw = tuple[NamedArrays, np.ndarray, torch.Tensor]


class TimeLimitSteps(NamedTuple):
    """The steps of a batch with a time limit, as ``torch.nonzero(..., as_tuple=True)`` gives them."""

    t: torch.Tensor  # [k] step indices
    b: torch.Tensor  # [k] sequence indices


class EveryStep(NamedTuple):
    """Every step may have a time limit: the values at every step, kept by ``torch.where`` where one
    is (the data-independent form a ``torch.func`` transform needs)."""


TimeLimits = TimeLimitSteps | EveryStep | None
# An update's new priorities, indexable by member: (priorities [B],) for one, [K, B] for K.
Priorities = tuple[torch.Tensor] | torch.Tensor


class LossMode(NamedTuple):
    """What a loss is told by its caller rather than finding out itself."""

    # The diagnostics beyond the loss (``q_mean``, ...) are computed: every ``diagnostic_period``-th
    # update (module docstring).
    measure: bool = True
    # Under a ``torch.func`` transform (a packed run): no branch may read the data, and R2D1's LSTM
    # runs step by step (``models.recurrent.stepwise_lstm``), which the transforms can batch.
    traced: bool = False
    # R2D1 only, where the batch keeps the true final observations of time-limit steps: None = no
    # time limit in the window; ``TimeLimitSteps`` = the steps that have one; ``EveryStep`` under a
    # transform (``traced``).
    time_limits: TimeLimits = None


class LossOut(NamedTuple):
    loss: torch.Tensor  # 0-dim
    priorities: torch.Tensor  # [B]: the new priority of each item of the batch
    diagnostics: dict[str, torch.Tensor]  # 0-dim each; {} unless ``mode.measure``


# ``loss(config, model, target_model, batch, mode)``; ``model`` and ``target_model`` are callables
# (modules, or functions of one member's parameters in a packed run).
LossFn = Callable[[Any, Callable[..., Any], Callable[..., Any], NamedArrays, LossMode], LossOut]


class GradStep(Protocol):
    """The seam between the update loop and the run kind: one update's gradient and optimizer step."""

    # Whether a member whose loss is not finite stops (a packed run's other members go on) or trains
    # on (a single run: the runner sees the non-finite diagnostics).
    stops_failed: bool

    def batch(self, draws: list[Draw]) -> NamedArrays:
        """The loss's input from the members' draws, on the learner's device."""

    def gradient_update(
        self, batch: NamedArrays, measure: bool
    ) -> tuple[dict[str, torch.Tensor], Priorities]:
        """Gradient and optimizer step on ``batch``. Returns the diagnostics (``loss``, and with
        ``measure`` also the loss's others and ``grad_norm``: 0-dim tensors for one member, ``[K]``
        for K) and the new priorities indexable by member."""

    def sync_targets(self) -> None:
        """The hard target update: target <- online."""


def replay_updates(
    learners: Sequence[QReplayLearner], members: Sequence[int], n_updates: int, grad_step: GradStep
) -> tuple[dict[int, dict[str, float]], dict[int, str]]:
    """``n_updates`` updates of the ``members`` (indices into ``learners``, ascending) still
    training; each member's diagnostics averaged over its updates, and the members that stopped
    (``GradStep.stops_failed``) with why. A stopped member still draws (fixed shapes), but its
    priorities and update count are not written from then on."""
    first = learners[members[0]]
    batch_size, update_priorities = first.draw_spec()
    keys = first.diagnostic_keys
    loss_at = keys.index("loss")
    period, diagnostic_period = first.config.target_update_period_updates, first.diagnostic_period
    sums = {k: [0.0] * len(keys) for k in members}
    counts = dict.fromkeys(members, 0)  # updates, each with its loss
    measured = dict.fromkeys(members, 0)  # updates with every diagnostic
    failures: dict[int, str] = {}
    live = list(members)
    done = first.updates  # every live member's count: they update in lockstep
    for _ in range(n_updates):
        measure = done % diagnostic_period == 0
        draws = [learner.replay.sample(batch_size) for learner in learners]
        info, priorities = grad_step.gradient_update(grad_step.batch(draws), measure)
        # One conversion for all of them: a float() per 0-dim tensor costs a few us each.
        if measure:
            rows = torch.stack([info[key] for key in keys], dim=-1).reshape(-1, len(keys)).tolist()
            losses = [row[loss_at] for row in rows]
        else:
            losses = info["loss"].reshape(-1).tolist()
        for k in live:
            if grad_step.stops_failed and not math.isfinite(losses[k]):
                mean = means(keys, sums[k], counts[k], measured[k])
                failures[k] = nonfinite_loss(losses[k], mean, learners[k].updates + 1)
                continue
            if update_priorities:
                learners[k].replay.update_priorities(draws[k][1], priorities[k].cpu())
            learners[k].updates += 1
            counts[k] += 1
            if measure:
                measured[k] += 1
                sums[k] = [total + value for total, value in zip(sums[k], rows[k])]
            else:
                sums[k][loss_at] += losses[k]
        if failures:
            live = [k for k in live if k not in failures]
        done += 1
        if done % period == 0:
            grad_step.sync_targets()
    return {k: means(keys, sums[k], counts[k], measured[k]) for k in members}, failures


def means(keys: Sequence[str], sums: list[float], count: int, measured: int) -> dict[str, float]:
    """The loss's sum over ``count`` updates and the other keys' over ``measured`` ones, as means."""
    return {
        key: total / n if n else math.nan
        for key, total in zip(keys, sums)
        for n in [count if key == "loss" else measured]
    }


class SingleGradStep:
    """A single run's gradient step: backpropagation through the algorithm's loss, the gradient
    clipped (``QReplayLearner.clip_gradients``), one step of its optimizer."""

    stops_failed = False

    def __init__(self, learner: QReplayLearner) -> None:
        self.learner = learner
        # Read once: reading it walks the model's parameters, as costly as the loop's own work. The
        # runners move the agent to its device before they build the learner.
        self.device = learner.agent.device

    def batch(self, draws: list[Draw]) -> NamedArrays:
        ((data, _, is_weights),) = draws
        batch = data.replace(is_weights=is_weights)
        if self.device.type != "cpu":  # the replay gives CPU tensors: no move per leaf otherwise
            batch = batch.to_torch(self.device)
        return batch

    def gradient_update(
        self, batch: NamedArrays, measure: bool
    ) -> tuple[dict[str, torch.Tensor], Priorities]:
        learner, config = self.learner, self.learner.config
        mode = learner.loss_mode(config, batch, measure=measure, traced=False)
        loss, priorities, info = learner.loss_fn(config, learner.model, learner.target_model, batch, mode)
        learner.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = learner.clip_gradients(measure)
        if norm is not None:
            info["grad_norm"] = norm
        learner.optimizer.step()
        info["loss"] = loss.detach()
        return info, (priorities,)

    def sync_targets(self) -> None:
        self.learner.target_model.load_state_dict(self.learner.model.state_dict())


class QReplayLearner:
    """The learner DQN (with C51 and Rainbow) and R2D1 share: model, target network, optimizer and
    replay; the warm-up test, the replay's storage and selector seed, the checkpoint, and a single
    run's updates (``replay_updates`` with ``SingleGradStep``), each a replay draw, the algorithm's
    ``loss_fn``, one clipped optimizer step, new priorities for the drawn items and the periodic
    hard target sync.

    An algorithm states what differs: ``loss_fn`` (and ``loss_mode`` where its loss is told more than
    whether to measure), ``credit_key`` and ``credit_type``, ``diagnostic_keys``, ``make_optimizer``,
    and the replay (``build_replay``, ``take_samples``, ``draw_spec``, ``opt_info``).

    Checkpointed state (``state_dict``): target network, optimizer, update count and ``credit``, the
    update schedule carried between calls (DQN: env steps not yet matched by an update; R2D1:
    replayed steps owed to the replay ratio), stored under the subclass's ``credit_key``. The
    replay goes into checkpoints on its own (``replay_state_dict``: its contents, priorities and
    generators, the steps appended, and a subclass's ``replay_extra_state``), when the runner's
    ``checkpoint_replay`` setting asks for it.
    """

    loss_fn: ClassVar[LossFn]
    credit_key: ClassVar[str]
    credit_type: ClassVar[type] = int
    diagnostic_keys: ClassVar[tuple[str, ...]]
    # The diagnostics beyond the loss are measured on updates 0, P, 2P, ... of the run (module docstring).
    diagnostic_period: ClassVar[int] = 10

    def __init__(self, config: Any, agent: Agent, counters_frameskip: int, batch_spec: BatchSpec) -> None:
        self.config = config
        self.agent = agent
        self.model = agent.model
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.optimizer = self.make_optimizer(self.model.parameters())
        self.batch_spec = BatchSpec(*batch_spec)
        self.clip_grad_norm = config.clip_grad_norm if config.clip_grad_norm > 0 else math.inf
        self.replay: ReplayBuffer | None = None  # built from the first batch's example step
        self.replay_example: NamedArrays | None = None
        self.replay_steps = 0  # steps appended since the replay was empty (``replay_state_dict``)
        self.updates = 0
        self.credit = self.credit_type(0)
        self.grad_step = SingleGradStep(self)
        # Taken on the first unclipped norm, not here: a DDP or packed run replaces the parameters
        # after the learner is built.
        self._norm_params: list[torch.nn.Parameter] | None = None

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        return adam(params, self.config.learning_rate, self.config.optimizer_eps)

    @staticmethod
    def loss_mode(config: Any, batch: NamedArrays, measure: bool, traced: bool) -> LossMode:
        """The ``LossMode`` of ``batch``, computed outside any transform (``batch`` may have a leading
        member dimension when ``traced``)."""
        return LossMode(measure=measure, traced=traced)

    @property
    def warm(self) -> bool:
        """Enough steps to learn from: counted since the replay was last empty, so a run resumed
        without its replay (``checkpoint_replay``) refills it first."""
        return (
            self.replay is not None
            and self.replay_steps >= self.config.learning_starts_steps
            and len(self.replay) > 0
        )

    def new_storage(self, storage_cls: type, example: NamedArrays, **kwargs: Any) -> Any:
        """``storage_cls`` (transitions or sequences) holding ``replay_size_steps`` env steps of this
        run's B envs, each frame stored once when observations are frame stacks (``observations_for``)."""
        observations = observations_for(example.observation)
        return storage_cls(self.config.replay_size_steps, self.batch_spec.B, example, observations, **kwargs)

    def ensure_replay(self, samples: NamedArrays) -> ReplayBuffer:
        """The replay, built on the first sampler batch from its first step (a copy, kept for
        ``replay_state_dict``: a resumed run builds the same layout before any batch)."""
        if self.replay is None:
            self.replay_example = samples.replace(bootstrap=None)[0, 0].map(lambda x: to_torch(x).clone())
            self.replay = self.build_replay(self.replay_example)
        return self.replay

    def build_replay(self, example: NamedArrays) -> ReplayBuffer:
        raise NotImplementedError

    def replay_state_dict(self) -> dict[str, Any] | None:
        """The replay and what goes with it, for a checkpoint (None before the first batch)."""
        if self.replay is None:
            return None
        return {
            "example": tree_state(self.replay_example),
            "buffer": self.replay.state_dict(),
            "replay_steps": self.replay_steps,
            **self.replay_extra_state(),
        }

    def load_replay_state_dict(self, state: dict[str, Any]) -> None:
        """Rebuild the replay ``replay_state_dict`` saved (before the run's RNG states are restored:
        building draws the selector's seed, which the saved generator state then replaces)."""
        self.replay_example = tree_from_state(state["example"])
        self.replay = self.build_replay(self.replay_example)
        self.replay.load_state_dict(state["buffer"])
        self.replay_steps = int(state["replay_steps"])
        self.load_replay_extra_state(state)

    def replay_extra_state(self) -> dict[str, Any]:
        """A subclass's state tied to the replay's contents (R2D1: TD errors of unfinished sequences)."""
        return {}

    def load_replay_extra_state(self, state: dict[str, Any]) -> None:
        """Restore ``replay_extra_state``'s keys from ``state``."""

    @staticmethod
    def selector_seed() -> int:
        """The replay selector's numpy seed, drawn from torch's global RNG (seeded by ``train()``) so
        that runs repeat."""
        return int(torch.randint(2**31 - 1, ()))

    def state_dict(self) -> dict[str, Any]:
        return {
            "target_model": self.target_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            self.credit_key: self.credit,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target_model.load_state_dict(state["target_model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.credit = self.credit_type(state[self.credit_key])

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        """Append the batch, then run the updates it makes due (``take_samples``: none while the
        replay warms up, so the diagnostics are NaN). The schedule counts the batch's own steps, not
        the run's ``env_steps``."""
        n_updates = self.take_samples(samples)
        diagnostics, _ = replay_updates([self], [0], n_updates, self.grad_step)
        return self.opt_info(n_updates, diagnostics[0])

    def learn(self, n_updates: int) -> OptInfo:
        """``n_updates`` updates from the replay without appending (Contract 4's async extension);
        none while warming up."""
        n_updates = n_updates if self.warm else 0
        diagnostics, _ = replay_updates([self], [0], n_updates, self.grad_step)
        return self.opt_info(n_updates, diagnostics[0])

    def take_samples(self, samples: NamedArrays) -> int:
        """Append a sampler batch to the replay; returns how many updates are now due (0 until warm)."""
        raise NotImplementedError

    def draw_spec(self) -> tuple[int, bool]:
        """(items per minibatch, whether updates write new priorities)."""
        raise NotImplementedError

    def opt_info(self, n_updates: int, diagnostics: dict[str, float]) -> OptInfo:
        """What ``n_updates`` updates did, with their averaged ``diagnostics``."""
        raise NotImplementedError

    def clip_gradients(self, measure: bool) -> torch.Tensor | None:
        """Clip the model's gradient to 2-norm ``clip_grad_norm``; returns the norm before clipping.
        With clipping off (inf) the norm is only a diagnostic: computed where ``measure`` (else
        None), with the two multi-tensor kernels ``clip_grad_norm_`` computes it with, without its
        grouping and scaling work (docs/results/bench_minatar.md)."""
        if math.isinf(self.clip_grad_norm):
            if not measure:
                return None
            # The parameter list is kept: walking the model's modules for it cost as much as the
            # norm of a MinAtar network's gradient (docs/results/bench_minatar.md).
            if self._norm_params is None:
                self._norm_params = list(self.model.parameters())
            grads = [p.grad for p in self._norm_params if p.grad is not None]
            return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
