"""What the three Q-value policy gradients (DDPG, TD3, SAC) share: the config fields, the critics, the
replay and its update schedule, the learner state, and one update (``qpg_update``), which single and
packed runs share through its gradient step: the algorithm itself steps a single run (``QpgAlgo``:
``critic_update``, ``actor_update``, ``count_update``, ``update_targets``), a packed run's learner
(``algorithms.packed.learners``) steps K members at once.

Each algorithm's losses stay in its file as functions of their inputs alone,
``critic_loss(config, models, batch, noise, mode)`` and ``actor_loss(...)`` the same: ``models`` a
``QpgModels`` (modules in a single run, functions of one member's slice of the stacked parameters in
a packed one), ``noise`` the update's random draws, ``mode`` a ``QpgMode``. An actor loss reads the
critics but trains only the actor (and SAC's temperature): a single run gives it the critics as a
``QEnsemble.frozen_view`` (their weights' gradients never computed), a packed run differentiates
only the actor's arguments.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch

from algorithms.agents.base import Agent
from algorithms.arrays import NamedArrays, to_torch
from algorithms.configs import check_field, check_ranges
from algorithms.functional.policy_losses import polyak_update_
from algorithms.learners.common import OptInfo, adam, minimize
from algorithms.models.ensemble import QEnsemble
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FullObservations
from algorithms.replay.selectors import UniformSelector
from algorithms.replay.transitions import NSTEP_STEP_BYTES, TransitionStorage
from algorithms.resume import tree_from_state, tree_state

Noise = dict[str, torch.Tensor]
Diagnostics = dict[str, torch.Tensor]


class QpgModels(NamedTuple):
    """The networks a DDPG, TD3 or SAC loss reads, as callables: modules in a single run, functions of
    one member's slice of the stacked parameters in a packed run."""

    actor: Callable[..., Any]
    critic: Callable[..., torch.Tensor]  # (observation, action, n_members=None) -> Q [K, N]
    critic_target: Callable[..., torch.Tensor]
    actor_target: Callable[..., torch.Tensor] | None  # DDPG, TD3
    log_alpha: torch.Tensor | None  # SAC's temperature (``Temperature``), 0-dim


class QpgMode(NamedTuple):
    """What a loss is told about its run rather than reading from a learner: the action box (TD3's
    target smoothing) and the entropy target (SAC's temperature)."""

    low: torch.Tensor  # [A]
    high: torch.Tensor  # [A]
    target_entropy: float


# ``critic_loss(config, models, batch, noise, mode)`` and ``actor_loss`` alike: (loss, diagnostics).
QpgLossFn = Callable[[Any, QpgModels, NamedArrays, Noise, QpgMode], tuple[torch.Tensor, Diagnostics]]


class QpgGradStep(Protocol):
    """The seam between one update and the run kind: the gradient steps on a minibatch ``batch`` and
    its random draws ``noise``, each returning its diagnostics as tensors."""

    def critic_update(self, batch: NamedArrays, noise: Noise) -> Diagnostics: ...

    def count_update(self) -> bool:
        """Count one critic update; whether the actor and the targets update after it."""

    def actor_update(self, batch: NamedArrays, noise: Noise) -> Diagnostics: ...

    def update_targets(self) -> None: ...


def qpg_update(grad_step: QpgGradStep, batch: NamedArrays, noise: Noise) -> Diagnostics:
    """One gradient update on a replay minibatch and its random draws: the critics, then, when due,
    the actor and the target networks; returns the update's diagnostics."""
    info = grad_step.critic_update(batch, noise)
    if grad_step.count_update():
        info.update(grad_step.actor_update(batch, noise))
        grad_step.update_targets()
    return info


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
    env_steps_per_update: float = 1.0  # one update per this many new env steps (Sec. 6.1: 1)

    # A subclass's own fields, checked by kind (``check_ranges``).
    POSITIVE: ClassVar[tuple[str, ...]] = ()
    POSITIVE_INTS: ClassVar[tuple[str, ...]] = ()
    NON_NEGATIVE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_ranges(
            self,
            unit=("discount",),
            positive=("actor_learning_rate", "critic_learning_rate", "env_steps_per_update", *self.POSITIVE),
            positive_ints=("batch_size", "replay_size_steps", *self.POSITIVE_INTS),
            non_negative=("random_steps", *self.NON_NEGATIVE),
            sizes=("hidden_sizes",),
        )
        check_field(self, 0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        check_field(
            self, self.learning_starts_steps >= self.batch_size, "learning_starts_steps", ">= batch_size"
        )


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
    ``learning_starts_steps`` transitions can be sampled, then one per ``env_steps_per_update`` new
    env steps (the remainder carried over, as DQN's schedule does). Checkpoints hold the replay and
    that remainder as ``RunnerConfig.checkpoint_replay`` asks (``state_dict``); a run resumed
    without them refills the replay to ``learning_starts_steps`` before training again.
    """

    def __init__(
        self, capacity_steps: int, discount: float, learning_starts_steps: int, env_steps_per_update: float
    ):
        self.capacity_steps = int(capacity_steps)
        self.discount = float(discount)
        self.learning_starts_steps = int(learning_starts_steps)
        self.env_steps_per_update = float(env_steps_per_update)
        self.replay: ReplayBuffer | None = None
        self.example: NamedArrays | None = None  # one step of the first batch, the replay's layout
        self.credit = 0.0  # env steps not yet matched by an update

    def build(self, example: NamedArrays, num_envs: int) -> None:
        """The replay, laid out from one step of the first batch (kept for ``state_dict``)."""
        self.example = example
        storage = TransitionStorage(
            self.capacity_steps,
            num_envs=num_envs,
            example=example,
            observations=FullObservations(),
            n_step=1,
            gamma=self.discount,
        )
        # Seeded from torch's global RNG, which train() seeds: same seed, same minibatches.
        sampler = UniformSelector(storage.num_items, seed=int(torch.randint(2**31 - 1, ()).item()))
        self.replay = ReplayBuffer(storage, sampler)

    def state_dict(self) -> dict[str, Any] | None:
        """The replay and the carried env steps, for a checkpoint (None before the first batch)."""
        if self.replay is None:
            return None
        return {
            "example": tree_state(self.example),
            "num_envs": self.replay.storage.ring.num_envs,
            "buffer": self.replay.state_dict(),
            "credit": self.credit,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.build(tree_from_state(state["example"]), int(state["num_envs"]))
        self.replay.load_state_dict(state["buffer"])
        self.credit = float(state["credit"])

    def append(self, samples: NamedArrays) -> int:
        if self.replay is None:
            example = samples.replace(bootstrap=None)[0, 0].map(lambda x: to_torch(x).clone())
            self.build(example, samples.reward.shape[1])
        self.replay.append(samples)
        if len(self.replay) < self.learning_starts_steps:
            return 0
        n_updates, self.credit = divmod(self.credit + samples.reward.numel(), self.env_steps_per_update)
        return int(n_updates)

    def sample(self, batch_size: int, device: torch.device) -> NamedArrays:
        """A uniform minibatch of ``observation, action, return_n, discount_n, next_observation``."""
        batch, _, _ = self.replay.sample(batch_size)
        return batch.to_torch(device)


class QpgAlgo:
    """The learner state DDPG, TD3 and SAC share, and their ``optimize``: the actor (``agent.model``)
    with its Adam and, for the deterministic actors of DDPG and TD3, its target copy; the critics; the
    replay. A subclass is declared with ``diagnostics`` (the progress columns its updates report),
    ``critics`` (how many) and ``actor_target`` (whether the actor has a target copy) as class
    keywords with the parts of one update (``qpg_update``): ``losses``, its module's critic and actor
    loss functions, and ``noise``, the function of a minibatch that makes the update's random draws
    first (none by default): ``class Algo(QpgAlgo, diagnostics=..., critics=2, actor_target=True,
    losses=(critic_loss, actor_loss), noise=draw_noise)``. A subclass may count its updates
    (``count_update``: whether the actor and the targets update after this critic update). The class
    is a single run's gradient step of ``qpg_update``.
    """

    DIAGNOSTICS: tuple[str, ...]
    N_CRITICS: int
    ACTOR_TARGET: bool
    critic_loss_fn: ClassVar[QpgLossFn]
    actor_loss_fn: ClassVar[QpgLossFn]
    # SAC's entropy temperature (``sac.Temperature``), a trained module of its own.
    temperature: torch.nn.Module | None = None

    @staticmethod
    def replay_step_bytes(config: QpgConfig, action: np.ndarray) -> float:
        """Bytes per env step ``ReplayFeed``'s replay keeps beside the ring's own fields
        (``registry.replay_bytes``): the 1-step transition fields and the uniform selector's flag."""
        return NSTEP_STEP_BYTES + UniformSelector.ITEM_BYTES

    def __init_subclass__(
        cls,
        *,
        diagnostics: tuple[str, ...],
        critics: int,
        actor_target: bool,
        losses: tuple[QpgLossFn, QpgLossFn],
        noise: Callable[[NamedArrays], Noise] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.DIAGNOSTICS, cls.N_CRITICS, cls.ACTOR_TARGET = diagnostics, critics, actor_target
        cls.critic_loss_fn, cls.actor_loss_fn = (staticmethod(fn) for fn in losses)
        if noise is not None:
            cls.draw_noise_fn = staticmethod(noise)

    def __init__(self, config: Any, agent: Agent, counters_frameskip: int, batch_spec: Any) -> None:
        self.config = config
        self.agent = agent
        self.actor = agent.model
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False) if self.ACTOR_TARGET else None
        self.actor_optimizer = adam(self.actor.parameters(), config.actor_learning_rate)
        self.critic = Critics(agent, config.hidden_sizes, self.N_CRITICS, config.critic_learning_rate)
        self.replay = ReplayFeed(
            config.replay_size_steps,
            config.discount,
            config.learning_starts_steps,
            config.env_steps_per_update,
        )
        device = agent.device
        action_dim = int(agent.action_space.shape[0])
        self.mode = QpgMode(agent.low.to(device), agent.high.to(device), -float(action_dim))

    @functools.cached_property
    def models(self) -> QpgModels:
        """This run's networks as the losses take them (built on first use, after a subclass's own)."""
        log_alpha = None if self.temperature is None else self.temperature.log_alpha
        return QpgModels(self.actor, self.critic.q, self.critic.target, self.actor_target, log_alpha)

    @functools.cached_property
    def actor_models(self) -> QpgModels:
        """The networks as the actor loss takes them: the critics as a ``frozen_view``, so that the
        loss trains the actor only and no critic weight gradient is computed."""
        return self.models._replace(critic=self.critic.q.frozen_view())

    def optimize(self, env_steps: int, samples: NamedArrays) -> OptInfo:
        """Append ``samples`` to the replay and run the updates now due (the schedule counts the
        batch's own steps, not the run's ``env_steps``)."""
        n_updates = self.replay.append(samples)
        return self.opt_info([qpg_update(self, batch, noise) for batch, noise in self.draws(n_updates)])

    def draws(self, n_updates: int) -> Iterator[tuple[NamedArrays, Noise]]:
        """The replay minibatches and random draws (``draw_noise_fn``) of ``n_updates`` updates, each
        drawn when asked for: after the previous update, in a single run."""
        for _ in range(n_updates):
            batch = self.replay.sample(self.config.batch_size, self.agent.device)
            yield batch, self.draw_noise_fn(batch)

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

    def update(self, batch: NamedArrays) -> Diagnostics:
        """One update on a replay minibatch, its random draws made now; returns its diagnostics."""
        return qpg_update(self, batch, self.draw_noise_fn(batch))

    def critic_update(self, batch: NamedArrays, noise: Noise) -> Diagnostics:
        critic_loss, info = self.critic_loss_fn(self.config, self.models, batch, noise, self.mode)
        minimize(self.critic.optimizer, critic_loss)
        return info

    def actor_update(self, batch: NamedArrays, noise: Noise) -> Diagnostics:
        actor_loss, info = self.actor_loss_fn(self.config, self.actor_models, batch, noise, self.mode)
        minimize(self.actor_optimizer, actor_loss)
        return info

    @staticmethod
    def draw_noise_fn(batch: NamedArrays) -> Noise:
        """The update's random draws, in the order the update uses them (none by default)."""
        return {}

    def count_update(self) -> bool:
        """Count one critic update; whether the actor and the targets update after it (every time
        by default)."""
        return True

    def update_targets(self) -> None:
        """Polyak-average the target networks toward the online ones with ``config.tau``."""
        polyak_update_(self.critic.target, self.critic.q, self.config.tau)
        if self.actor_target is not None:
            polyak_update_(self.actor_target, self.actor, self.config.tau)

    def replay_state_dict(self) -> dict[str, Any] | None:
        """The replay and its update schedule, for a checkpoint (``ReplayFeed.state_dict``)."""
        return self.replay.state_dict()

    def load_replay_state_dict(self, state: dict[str, Any]) -> None:
        self.replay.load_state_dict(state)

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
