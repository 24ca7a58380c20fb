"""What an algorithm's ``optimize`` returns to the runner (docs/ARCHITECTURE.md, Contract 4), the
fused Adam every algorithm uses, the update loop DQN
(C51, Rainbow) and R2D1 share (``QReplayLearner``), and the pieces the three Q-value policy
gradients (DDPG, TD3, SAC) share: their replay schedule, critics and learner state. Each
algorithm's loss stays in its own file.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays
from algorithms.configs import check_field, check_ranges
from algorithms.functional.policy_losses import polyak_update_
from algorithms.models.ensemble import QEnsemble
from algorithms.models.torsos import CONV_TORSOS
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FullObservations, observations_for
from algorithms.replay.selectors import UniformSelector
from algorithms.replay.transitions import TransitionStorage


@dataclass
class OptInfo:
    """Work done by one ``optimize`` call.

    ``samples_trained`` counts the steps that entered the loss; ``samples_replayed`` adds the burn-in
    steps that were run through the network but not trained on (R2D1). The runner passes both to
    ``Counters.add_updates`` so the replay ratio can be reported both ways.
    """

    updates: int = 0
    samples_trained: int = 0
    samples_replayed: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)


# --- actor-critic policy gradients: A2C, PPO -----------------------------------------------------


def anneal_fraction(env_steps: int, anneal_env_steps: int) -> float:
    """1 at the start of training, falling linearly to 0 at ``anneal_env_steps`` (1 if that is 0).

    ``env_steps`` is the run's count (``agent.env_steps``, set by the runner before ``optimize``),
    not one process's iterations x batch: under data-parallel training every rank then anneals on
    the global count.
    """
    if anneal_env_steps == 0:
        return 1.0
    return max(0.0, 1.0 - env_steps / anneal_env_steps)


def validate_pg_config(
    config: Any,
    positive: tuple[str, ...] = (),
    positive_ints: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
) -> None:
    """The field checks of the A2C and PPO configs: the fields both have, plus the named extra ones.
    Raises ``ValueError`` naming ``<algo>.Config.<field>`` and its value."""
    check_ranges(
        config,
        unit=("discount", "gae_lambda"),
        positive=("learning_rate", "optimizer_eps", *positive),
        positive_ints=("lstm_size", *positive_ints),
        non_negative=("value_coef", "entropy_coef", "clip_grad_norm", "anneal_env_steps", *non_negative),
        sizes=("hidden_sizes",),
    )
    check_field(config, config.conv_torso in CONV_TORSOS, "conv_torso", f"one of {CONV_TORSOS}")


class PgLearner:
    """What the A2C and PPO learners share: the config, the agent, the [T, B] batch shape and one
    optimizer over the model (``make_optimizer``), checkpointed with ``state_dict``."""

    def __init__(self, config: Any, agent: Agent, counters_frameskip: int, batch_spec: Any) -> None:
        self.config = config
        self.agent = agent
        self.T, self.B = int(batch_spec.T), int(batch_spec.B)
        self.optimizer = self.make_optimizer(agent.model.parameters())

    def make_optimizer(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])


# --- Q-learning from replay: DQN (C51, Rainbow) and R2D1 ------------------------------------------


class QReplayLearner:
    """The update loop DQN (with C51 and Rainbow) and R2D1 share: the warm-up test and ``updates``
    minibatch steps, each a replay draw, ``loss(batch) -> (loss, priorities, info)``, one clipped
    optimizer step, new priorities for the drawn items and the periodic hard target sync.

    Checkpointed state (``state_dict``): target network, optimizer, update count and ``credit``, the
    update schedule carried between calls (DQN: env steps not yet matched by an update; R2D1:
    replayed steps owed to the replay ratio), stored under the subclass's ``credit_key``.

    Subclasses set ``config`` (with ``learning_starts_steps`` and ``target_update_period_updates``),
    ``agent``, ``model``, ``target_model``, ``optimizer``, ``clip_grad_norm``, ``replay``,
    ``replay_steps``, ``updates``, ``diagnostic_keys`` and ``loss``.
    """

    @property
    def warm(self) -> bool:
        """Enough steps to learn from. Counted per process: a resumed run refills its replay first."""
        return (
            self.replay is not None
            and self.replay_steps >= self.config.learning_starts_steps
            and len(self.replay) > 0
        )

    credit_key: str

    def new_storage(self, storage_cls: type, example: NamedArrays, **kwargs: Any) -> Any:
        """``storage_cls`` (transitions or sequences) holding ``replay_size_steps`` env steps of this
        run's B envs, each frame stored once when observations are frame stacks (``observations_for``)."""
        observations = observations_for(example.observation)
        return storage_cls(self.config.replay_size_steps, self.batch_spec.B, example, observations, **kwargs)

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
        self.credit = type(self.credit)(state[self.credit_key])

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        """Append the batch, then the updates it makes due (``take_samples``)."""
        return self.train(itr, self.take_samples(samples))

    def take_samples(self, samples: NamedArrays) -> int:
        """Append a sampler batch to the replay; returns how many updates are now due."""
        raise NotImplementedError

    def minibatch(self) -> tuple[int, bool]:
        """(items per minibatch, whether updates write new priorities)."""
        raise NotImplementedError

    def opt_info(self, n_updates: int, diagnostics: dict[str, float]) -> OptInfo:
        """What ``n_updates`` updates did, with their averaged ``diagnostics``."""
        raise NotImplementedError

    def packed_flags(self, batch: NamedArrays) -> dict[str, Any]:
        """Attributes a packed learner sets on the loss's view of this algorithm for the members'
        stacked minibatch ``batch`` (``algorithms.packed``): what the loss would otherwise learn by
        branching on the data, which ``torch.func.vmap`` forbids. None by default."""
        return {}

    def train(self, itr: int, n_updates: int) -> OptInfo:
        """``n_updates`` updates from the replay (none while warming up: NaN diagnostics)."""
        if not self.warm:
            return OptInfo(diagnostics=dict.fromkeys(self.diagnostic_keys, math.nan))
        return self.opt_info(n_updates, self.run_updates(n_updates))

    def clip_gradients(self) -> torch.Tensor:
        """Clip the model's gradient to 2-norm ``clip_grad_norm``; returns the norm before clipping.
        With clipping off (inf) only the norm is computed, for the ``grad_norm`` diagnostic: the two
        multi-tensor kernels ``clip_grad_norm_`` computes it with, without its grouping and scaling
        work (docs/results/bench_minatar.md)."""
        if math.isinf(self.clip_grad_norm):
            # The parameter list is kept: walking the model's modules for it cost as much as the
            # norm of a MinAtar network's gradient (docs/results/bench_minatar.md).
            params = self.__dict__.get("_norm_params")
            if params is None:
                params = self._norm_params = list(self.model.parameters())
            grads = [p.grad for p in params if p.grad is not None]
            return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)

    def run_updates(self, n_updates: int) -> dict[str, float]:
        """``n_updates`` minibatch steps; the diagnostics averaged over them.

        ``loss`` returns its diagnostics as 0-dim tensors, so that the same loss runs under
        ``torch.func.vmap`` for packed runs (``algorithms.packed``); they become floats here.
        """
        batch_size, update_priorities = self.minibatch()
        diagnostics: dict[str, list[float]] = {key: [] for key in self.diagnostic_keys}
        device = self.agent.device
        for _ in range(n_updates):
            data, items, is_weights = self.replay.sample(batch_size)
            batch = data.replace(is_weights=is_weights)
            if device.type != "cpu":  # the replay gives CPU tensors: no move per leaf otherwise
                batch = batch.to_torch(device)
            loss, priorities, info = self.loss(batch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            info["grad_norm"] = self.clip_gradients()
            self.optimizer.step()
            if update_priorities:
                self.replay.update_priorities(items, priorities.cpu())
            self.updates += 1
            if self.updates % self.config.target_update_period_updates == 0:
                self.target_model.load_state_dict(self.model.state_dict())
            info["loss"] = loss.detach()
            # One conversion for all of them: a float() per 0-dim tensor costs a few us each.
            for key, value in zip(info, torch.stack(list(info.values())).tolist()):
                diagnostics[key].append(value)
        return {key: sum(v) / len(v) if v else math.nan for key, v in diagnostics.items()}


# --- Q-value policy gradients: DDPG, TD3, SAC -----------------------------------------------------


@dataclass(frozen=True)
class QpgConfig:
    """The fields DDPG, TD3 and SAC share; the defaults are Fujimoto et al. 2018's (Sec. 6.1), which
    DDPG's and TD3's Configs keep and SAC's replaces with its own."""

    discount: float = 0.99
    tau: float = 0.005
    batch_size: int = 100
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    hidden_sizes: tuple[int, ...] = (400, 300)
    replay_size_steps: int = 1_000_000
    random_steps: int = 10_000  # uniform-random actions for this many env steps
    learning_starts_steps: int = 10_000  # transitions in replay before the first update
    updates_per_step: float = 1.0

    # A subclass's own fields, checked by kind (``check_ranges``).
    POSITIVE: ClassVar[tuple[str, ...]] = ()
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ()
    NON_NEGATIVE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_ranges(
            self,
            unit=("discount",),
            positive=("actor_learning_rate", "critic_learning_rate", "updates_per_step", *self.POSITIVE),
            positive_ints=("batch_size", "replay_size_steps", *self.POSITIVE_INTS),
            non_negative=("random_steps", *self.NON_NEGATIVE),
            sizes=("hidden_sizes",),
        )
        check_field(self, 0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        check_field(
            self, self.learning_starts_steps >= self.batch_size, "learning_starts_steps", ">= batch_size"
        )


class WithoutCompiler:
    """An optimizer mixin: ``Optimizer``'s ``add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` without the ``torch._disable_dynamo`` wrapper, whose first call imports the
    compiler stack (``torch._dynamo``, about 1 CPU second) only to keep ``torch.compile`` from
    tracing them; nothing in this code base compiles (docs/results/r2d1_minatar_speed.md, "Startup").

    ``step`` is left unwrapped: ``Optimizer`` wraps every subclass's ``step`` for the profiler and
    step hooks (``profile_hook_step``), tens of microseconds per update (docs/results/bench_minatar.md).
    A subclass's ``step`` is decorated with ``run_step_hooks`` instead, which runs registered step
    hooks (the multi-GPU runner's gradient averaging registers one) and costs nothing without."""

    def _patch_step_function(self) -> None:
        self._zero_grad_profile_name = f"Optimizer.zero_grad#{type(self).__name__}.zero_grad"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        torch.optim.Optimizer.add_param_group.__wrapped__(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            torch.optim.Optimizer.zero_grad.__wrapped__(self, set_to_none)
            return
        for group in self.param_groups:  # what Optimizer.zero_grad does here, without its profiling
            for p in group["params"]:
                p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return torch.optim.Optimizer.state_dict.__wrapped__(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.optim.Optimizer.load_state_dict.__wrapped__(self, state_dict)


def run_step_hooks(step: Any) -> Any:
    """Decorates a ``WithoutCompiler`` optimizer's ``step``: where step hooks are registered (global
    or the optimizer's own), they run as ``Optimizer``'s own wrapper runs them (pre hooks may replace
    the arguments; post hooks see them); without any, ``step`` runs directly."""

    @functools.wraps(step)
    def stepped(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        pre = (*_global_optimizer_pre_hooks.values(), *self._optimizer_step_pre_hooks.values())
        post = (*self._optimizer_step_post_hooks.values(), *_global_optimizer_post_hooks.values())
        for hook in pre:
            replaced = hook(self, args, kwargs)
            if replaced is not None:
                args, kwargs = replaced
        out = step(self, *args, **kwargs)
        for hook in post:
            hook(self, args, kwargs)
        return out

    return stepped


class Adam(WithoutCompiler, torch.optim.Adam):
    """``torch.optim.Adam`` that does not import the compiler stack (``WithoutCompiler``; its
    ``step`` is wrapped in ``_use_grad_for_differentiable``, which imports ``torch._dynamo`` on every
    call for a ``torch.compile`` graph break: the same step here, gradient recording off as there)."""

    @run_step_hooks
    def step(self, closure: Any = None) -> Any:
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return torch.optim.Adam.step.__wrapped__(self, closure)


def adam(params: Iterable[Any], learning_rate: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel: one pass over all tensors of the group per step instead of the CPU
    default's per-tensor loop, same update rule up to float rounding (tests/test_qpg_algos.py,
    tests/test_algos_fused_adam.py); about 4-5x faster per step on CPU
    (docs/results/core_measurements.md, "algorithms/algos/base.py")."""
    return Adam(params, lr=learning_rate, eps=eps, fused=True)


def minimize(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One gradient step of ``optimizer`` on ``loss`` (gradients cleared first)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


class Critics:
    """K Q-networks in one ``QEnsemble`` (DDPG K = 1; TD3, SAC K = 2), their Polyak-averaged target
    copy and one Adam over all members (Adam is elementwise: the same as one optimizer per member)."""

    def __init__(
        self, agent: Agent, hidden_sizes: tuple[int, ...], n_members: int, learning_rate: float
    ) -> None:
        observation_dim, action_dim = int(agent.observation_space.shape[0]), int(agent.action_space.shape[0])
        self.q = QEnsemble(observation_dim, action_dim, hidden_sizes, n_members).to(agent.device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = adam(self.q.parameters(), learning_rate)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Q-values computed inside carry gradients to the action only: an actor loss trains the actor,
        and the critics' weight gradients (two products per layer) are not computed at all."""
        self.q.requires_grad_(False)
        try:
            yield
        finally:
            self.q.requires_grad_(True)

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.q.state_dict(),
            "critic_target": self.target.state_dict(),
            "critic_optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["critic"])
        self.target.load_state_dict(state["critic_target"])
        self.optimizer.load_state_dict(state["critic_optimizer"])


class ReplayFeed:
    """The uniform replay of DDPG, TD3 and SAC and their update schedule.

    Sampler batches go into a 1-step ``TransitionStorage`` with full observations, so a truncated
    episode's transition bootstraps from its stored ``final_observation`` and a terminal one not at
    all (``discount_n`` = 0). ``append`` returns how many updates are due: none until
    ``learning_starts_steps`` transitions can be sampled, then ``updates_per_step`` per new env step
    (fractions carried over). The replay is not checkpointed (Contract 4, runners/sync.py): after a
    resume it refills to ``learning_starts_steps`` before training again.
    """

    def __init__(
        self, capacity_steps: int, discount: float, learning_starts_steps: int, updates_per_step: float
    ):
        self.capacity_steps = int(capacity_steps)
        self.discount = float(discount)
        self.learning_starts_steps = int(learning_starts_steps)
        self.updates_per_step = float(updates_per_step)
        self.replay: ReplayBuffer | None = None
        self.update_credit = 0.0

    def append(self, samples: NamedArrays) -> int:
        if self.replay is None:  # the storage is laid out from the first batch's fields
            storage = TransitionStorage(
                self.capacity_steps,
                num_envs=samples.reward.shape[1],
                example=samples.replace(bootstrap=None)[0, 0],
                observations=FullObservations(),
                n_step=1,
                gamma=self.discount,
            )
            # Seeded from torch's global RNG, which train() seeds: same seed, same minibatches.
            sampler = UniformSelector(storage.num_items, seed=int(torch.randint(2**31 - 1, ()).item()))
            self.replay = ReplayBuffer(storage, sampler)
        self.replay.append(samples)
        if len(self.replay) < self.learning_starts_steps:
            return 0
        self.update_credit += samples.reward.numel() * self.updates_per_step
        n_updates = int(self.update_credit)
        self.update_credit -= n_updates
        return n_updates

    def sample(self, batch_size: int, device: torch.device) -> NamedArrays:
        """A uniform minibatch of ``observation, action, return_n, discount_n, next_observation``."""
        batch, _, _ = self.replay.sample(batch_size)
        return batch.to_torch(device)


class QpgAlgo:
    """The learner state DDPG, TD3 and SAC share, and their ``optimize``: the actor (``agent.model``)
    with its Adam and, for the deterministic actors of DDPG and TD3, its target copy; the critics; the
    replay. A subclass is declared with ``diagnostics`` (the progress columns its ``update``
    reports), ``critics`` (how many) and ``actor_target`` (whether the actor has a target copy) as
    class keywords, ``class Algo(QpgAlgo, diagnostics=..., critics=2, actor_target=True)``, and defines
    one update on a replay minibatch (``update``) as its parts: ``draw_noise`` (the update's random
    draws, made first), ``critic_loss`` and ``actor_loss`` (each ``(loss, {key: scalar tensor})``,
    functions of the batch, the draws and the networks) and ``count_update`` (whether the actor and
    the targets update after this critic update). A packed run (``algorithms.packed``) evaluates the
    same parts for K members at once.
    """

    DIAGNOSTICS: tuple[str, ...]
    N_CRITICS: int
    ACTOR_TARGET: bool

    def __init_subclass__(
        cls, *, diagnostics: tuple[str, ...], critics: int, actor_target: bool, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.DIAGNOSTICS, cls.N_CRITICS, cls.ACTOR_TARGET = diagnostics, critics, actor_target

    def __init__(self, config: Any, agent: Agent, counters_frameskip: int, batch_spec: Any) -> None:
        self.config = config
        self.agent = agent
        self.actor = agent.model
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False) if self.ACTOR_TARGET else None
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_learning_rate)
        self.critic = Critics(agent, config.hidden_sizes, self.N_CRITICS, config.critic_learning_rate)
        self.replay = ReplayFeed(
            config.replay_size_steps, config.discount, config.learning_starts_steps, config.updates_per_step
        )

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        """Append ``samples`` to the replay and run the updates now due."""
        n_updates = self.replay.append(samples)
        batch_size, device = self.config.batch_size, self.agent.device
        return self.opt_info([self.update(self.replay.sample(batch_size, device)) for _ in range(n_updates)])

    def opt_info(self, infos: list[dict[str, Any]]) -> OptInfo:
        """The ``OptInfo`` of a call's updates, ``infos`` their diagnostics. Every call reports the same
        keys (the progress table's columns): the mean over this call's updates, NaN for a key no
        update reported (before learning starts; TD3's actor loss in a call without a delayed policy
        update)."""
        values: dict[str, list[Any]] = {key: [] for key in self.DIAGNOSTICS}
        for info in infos:
            for key, value in info.items():
                values[key].append(value)
        # One update per call is the common case (T = 1 sampler batches): a float per value, no stacking.
        diagnostics = {key: sum(map(float, v)) / len(v) if v else float("nan") for key, v in values.items()}
        trained = len(infos) * self.config.batch_size
        return OptInfo(
            updates=len(infos), samples_trained=trained, samples_replayed=trained, diagnostics=diagnostics
        )

    def update(self, batch: NamedArrays) -> dict[str, torch.Tensor]:
        """One gradient update on a replay minibatch: the critics, then, when due, the actor and the
        target networks; returns the update's diagnostics."""
        noise = self.draw_noise(batch)
        critic_loss, info = self.critic_loss(batch, noise)
        minimize(self.critic.optimizer, critic_loss)
        if self.count_update():
            actor_loss, actor_info = self.actor_loss(batch, noise)
            minimize(self.actor_optimizer, actor_loss)
            self.update_targets()
            info.update(actor_info)
        return info

    def draw_noise(self, batch: NamedArrays) -> dict[str, torch.Tensor]:
        """The update's random draws, in the order the update uses them (none by default)."""
        return {}

    def critic_loss(
        self, batch: NamedArrays, noise: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def actor_loss(
        self, batch: NamedArrays, noise: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def count_update(self) -> bool:
        """Count one critic update; whether the actor and the targets update after it (every time
        by default)."""
        return True

    def update_targets(self) -> None:
        """Polyak-average the target networks toward the online ones with ``config.tau``."""
        polyak_update_(self.critic.target, self.critic.q, self.config.tau)
        if self.actor_target is not None:
            polyak_update_(self.actor_target, self.actor, self.config.tau)

    def state_dict(self) -> dict[str, Any]:
        state = {**self.critic.state_dict(), "actor_optimizer": self.actor_optimizer.state_dict()}
        if self.actor_target is not None:
            state["actor_target"] = self.actor_target.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state)
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        if self.actor_target is not None:
            self.actor_target.load_state_dict(state["actor_target"])
