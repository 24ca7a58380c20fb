"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, "Continuous control with deep
reinforcement learning", Algorithm 1), in the "Our DDPG" form of Fujimoto et al. 2018 (Sec. 6.1 and
Table 3), the re-tuned baseline TD3 is compared against.

``optimize`` appends each sampler batch to a uniform replay and, once ``learning_starts_steps``
transitions are stored, makes ``updates_per_step`` updates per new env step. One update:

    y = r + discount_t * Q'(s', mu'(s'))
    critic: minimise (Q(s, a) - y)^2
    actor:  maximise Q(s, mu(s))  (the deterministic policy gradient, Silver et al. 2014)
    targets: Polyak averaging with tau after every update

``discount_t`` is gamma, or 0 where the transition ended in a terminal state; a truncated episode
still bootstraps from its true final observation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import DeterministicAgent
from algorithms.algos.base import OptInfo
from algorithms.arrays import NamedArrays
from algorithms.functional.policy_losses import polyak_update_, q_target
from algorithms.models.policies import DeterministicPolicy, QNetwork
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import FullObservations
from algorithms.replay.samplers import UniformSampler
from algorithms.replay.transitions import TransitionStorage


@dataclass(frozen=True)
class Config:
    """ "Our DDPG" of Fujimoto et al. 2018 (Sec. 6.1, Table 3): 400-300 ReLU actor and critic (the
    action enters the critic's first layer, unlike Lillicrap et al.'s second), Adam 1e-3 for both
    (Lillicrap: 1e-4 actor, 1e-3 critic with 1e-2 L2), tau 0.005 (Lillicrap: 0.001), batch 100
    (Lillicrap: 64), Gaussian exploration N(0, 0.1) (Lillicrap: Ornstein-Uhlenbeck, theta 0.15,
    sigma 0.2), no observation normalisation, gamma 0.99, replay 1M, one update per env step, and
    the same uniform-random warm-up as TD3 (10,000 steps for HalfCheetah and Ant, 1,000 otherwise).
    """

    discount: float = 0.99
    tau: float = 0.005
    batch_size: int = 100
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    hidden_sizes: tuple[int, ...] = (400, 300)
    exploration_std: float = 0.1
    replay_size_steps: int = 1_000_000
    random_steps: int = 10_000
    learning_starts_steps: int = 10_000
    updates_per_step: float = 1.0

    def __post_init__(self) -> None:
        def require(condition: bool, field: str, what: str) -> None:
            if not condition:
                raise ValueError(f"ddpg.Config.{field} must be {what}, got {getattr(self, field)!r}")

        require(0.0 <= self.discount <= 1.0, "discount", "in [0, 1]")
        require(0.0 < self.tau <= 1.0, "tau", "in (0, 1]")
        for field in ("actor_learning_rate", "critic_learning_rate", "updates_per_step"):
            require(getattr(self, field) > 0, field, "> 0")
        for field in ("batch_size", "replay_size_steps"):
            require(isinstance(getattr(self, field), int) and getattr(self, field) >= 1, field, "an int >= 1")
        for field in ("exploration_std", "random_steps"):
            require(getattr(self, field) >= 0, field, ">= 0")
        require(self.learning_starts_steps >= self.batch_size, "learning_starts_steps", ">= batch_size")
        require(
            isinstance(self.hidden_sizes, tuple) and all(h >= 1 for h in self.hidden_sizes),
            "hidden_sizes",
            "a tuple of positive ints",
        )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> Config:
        if name not in PRESETS:
            raise ValueError(f"unknown DDPG preset {name!r}; known: {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    "mujoco_halfcheetah_ant": {},
    "mujoco": {"random_steps": 1_000, "learning_starts_steps": 1_000},
    "pendulum": {"random_steps": 1_000, "learning_starts_steps": 1_000},
}


class ReplayFeed:
    """The uniform replay of DDPG, TD3 and SAC and their update schedule (one file per algorithm, one
    replay policy for the three).

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
            sampler = UniformSampler(storage.num_items, seed=int(torch.randint(2**31 - 1, ()).item()))
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


def run_updates(
    feed: ReplayFeed, samples: NamedArrays, batch_size: int, update, device, keys: tuple[str, ...]
) -> OptInfo:
    """Append ``samples`` to ``feed`` and run the due ``update(minibatch) -> diagnostics`` calls.

    Every call reports the same diagnostic ``keys`` (the progress table's columns): the mean over
    this call's updates, NaN for a key no update reported (before learning starts; TD3's actor
    loss in a call without a delayed policy update).
    """
    n_updates = feed.append(samples)
    values: dict[str, list[torch.Tensor]] = {key: [] for key in keys}
    for _ in range(n_updates):
        for key, value in update(feed.sample(batch_size, device)).items():
            values[key].append(value)
    diagnostics = {key: float(torch.stack(v).mean()) if v else float("nan") for key, v in values.items()}
    trained = n_updates * batch_size
    return OptInfo(
        updates=n_updates, samples_trained=trained, samples_replayed=trained, diagnostics=diagnostics
    )


DIAGNOSTICS = ("critic_loss", "actor_loss", "q_mean")


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> DeterministicAgent:
    model = DeterministicPolicy(int(observation_space.shape[0]), action_space, config.hidden_sizes)
    return DeterministicAgent(
        model, observation_space, action_space, config.exploration_std, config.random_steps
    )


class Algo:
    """DDPG learner: critic, target networks, replay (see the module docstring)."""

    def __init__(
        self, config: Config, agent: DeterministicAgent, counters_frameskip: int, batch_spec
    ) -> None:
        self.config = config
        self.agent = agent
        self.actor = agent.model
        observation_dim, action_dim = int(agent.observation_space.shape[0]), int(agent.action_space.shape[0])
        self.critic = QNetwork(observation_dim, action_dim, config.hidden_sizes).to(agent.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=config.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_learning_rate)
        self.replay = ReplayFeed(
            config.replay_size_steps, config.discount, config.learning_starts_steps, config.updates_per_step
        )

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        return run_updates(
            self.replay, samples, self.config.batch_size, self.update, self.agent.device, DIAGNOSTICS
        )

    def update(self, batch: NamedArrays) -> dict[str, torch.Tensor]:
        c = self.config
        with torch.no_grad():
            next_q = self.critic_target(batch.next_observation, self.actor_target(batch.next_observation))
            y = q_target(batch.return_n, batch.discount_n, next_q)
        q = self.critic(batch.observation, batch.action)
        critic_loss = F.mse_loss(q, y)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        self.critic.requires_grad_(False)  # the actor loss trains the actor only
        actor_loss = -self.critic(batch.observation, self.actor(batch.observation)).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.critic.requires_grad_(True)
        self.actor_optimizer.step()
        polyak_update_(self.actor_target, self.actor, c.tau)
        polyak_update_(self.critic_target, self.critic, c.tau)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q_mean": q.detach().mean(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
