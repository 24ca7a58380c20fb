"""DQN (Mnih et al. 2015, "Human-level control through deep reinforcement learning", Nature) and the
options that Rainbow (Hessel et al. 2018) later combined: double Q-learning (van Hasselt et al.
2016), the dueling network (Wang et al. 2016), prioritized replay (Schaul et al. 2016) and n-step
returns (Sutton 1988; Hessel et al. 2018, Sec. 2).

One update::

    (s, a, G, discount, s') ~ replay             # G: n-step return, discount: gamma^m or 0 at terminals
    y = G + discount * max_a' Q_target(s', a')   # double: Q_target(s', argmax_a' Q(s', a'))
    loss = mean_i w_i * huber(Q(s_i, a_i) - y_i) # w: importance weights (1 without prioritization)
    priorities <- |Q(s, a) - y|                  # prioritized only
    every target_update_period_updates: Q_target <- Q

``optimize`` appends each sampler batch to the replay and, once ``learning_starts_steps`` env steps have
been collected, runs one update per ``env_steps_per_update`` env steps (Nature: 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from algorithms.agents.dqn_agents import EpsilonGreedyAgent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.arrays import NamedArrays
from algorithms.configs import check_field, check_ranges
from algorithms.functional.td import (
    double_q_learning_target,
    huber_loss,
    q_learning_target,
    select_action_values,
    squared_loss,
)
from algorithms.learners.common import OptInfo, WithoutCompiler, adam, require_action_space, run_step_hooks
from algorithms.learners.q_replay import LossMode, LossOut, QReplayLearner
from algorithms.models.dqn_model import QNetwork
from algorithms.models.torsos import CONV_TORSOS
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import observations_for
from algorithms.replay.selectors import PrioritizedSelector, UniformSelector
from algorithms.replay.transitions import NSTEP_STEP_BYTES, TransitionStorage, transition_rows

OPTIMIZERS = ("rmsprop", "adam")
LOSSES = ("huber", "squared")


@dataclass(frozen=True)
class Config:
    """DQN settings. Defaults are Nature DQN (Mnih et al. 2015, Extended Data Table 1) unless noted:
    ``repro/configs/settings/dqn_nature.toml``'s values, with their sources (tests/test_config_defaults.py).

    Counts are env steps (agent steps; 4 Atari frames each) or updates, as the names say. Dopamine's
    ``dqn_nature.gin`` reads the table the same way (e.g. 50k agent steps before learning).
    """

    discount: float = 0.99
    batch_size: int = 32
    replay_size_steps: int = 1_000_000
    learning_starts_steps: int = 50_000  # "replay start size"
    env_steps_per_update: int = 4  # "update frequency": env steps (summed over envs) per update
    # The table says 10,000 "parameter updates", but DeepMind's code counted agent steps (target_q =
    # 10000 in run_gpu), i.e. 2,500 updates at one update per 4 steps; Dopamine and SB3 do the same.
    target_update_period_updates: int = 2_500
    loss: str = "huber"  # Nature clips the TD error's gradient to [-1, 1]: the Huber loss
    optimizer: str = "rmsprop"
    learning_rate: float = 2.5e-4
    # Nature's RMSProp (squared gradient momentum 0.95) is the centered variant; its "min squared
    # gradient 0.01" sits inside the square root, torch adds eps outside: Dopamine uses 1e-5 there.
    rmsprop_alpha: float = 0.95
    optimizer_eps: float = 1e-5  # RMSprop eps (or Adam eps with optimizer="adam")
    clip_grad_norm: float = 0.0  # 0 = no clipping (Nature)
    # Options, all off in Nature DQN.
    double: bool = False  # van Hasselt et al. 2016
    dueling: bool = False  # Wang et al. 2016
    n_step: int = 1
    prioritized: bool = False  # Schaul et al. 2016, proportional variant
    priority_alpha: float = 0.6  # Schaul et al. 2016, Table 1 (proportional)
    priority_beta_start: float = 0.4  # Schaul et al. 2016, Table 1; annealed linearly to 1 ...
    # ... by the end of learning: 50M frames = 12.5M steps = 3.125M updates at one per 4 steps.
    priority_beta_anneal_updates: int = 3_125_000
    # Exploration (Extended Data Table 1: 1.0 -> 0.1 over the first 1M frames = 250k steps).
    eps_start: float = 1.0
    eps_final: float = 0.1
    eps_decay_steps: int = 250_000
    eps_per_env: Literal["same", "apex"] = "same"
    eps_eval: float = 0.05  # Nature Methods, "Evaluation procedure"
    # Network: ``conv_torso`` for (C, H, W) observations (``models.torsos.CONV_TORSOS``: "nature",
    # Mnih et al. 2015; "minatar" / "minatar_same" for MinAtar's 10x10 maps), an MLP for vectors.
    conv_torso: str = "nature"
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    hidden_size: int = 512  # the fully connected layer after the convolutions; each dueling stream; 0 = none

    def __post_init__(self) -> None:
        check_ranges(
            self,
            unit=("discount", "priority_beta_start"),
            positive=("learning_rate", "optimizer_eps"),
            positive_ints=(
                "batch_size",
                "replay_size_steps",
                "env_steps_per_update",
                "target_update_period_updates",
                "n_step",
            ),
            non_negative=(
                "learning_starts_steps",
                "priority_beta_anneal_updates",
                "priority_alpha",
                "clip_grad_norm",
            ),
            sizes=("mlp_hidden_sizes",),
        )
        check_field(self, self.optimizer in OPTIMIZERS, "optimizer", f"one of {OPTIMIZERS}")
        check_field(self, 0.0 <= self.rmsprop_alpha < 1.0, "rmsprop_alpha", "in [0, 1)")
        check_field(self, self.hidden_size >= 0, "hidden_size", ">= 0 (0: no hidden layer)")
        check_field(self, self.conv_torso in CONV_TORSOS, "conv_torso", f"one of {CONV_TORSOS}")
        self.epsilon_schedule  # validates the eps_* fields  # noqa: B018
        check_field(self, self.loss in LOSSES, "loss", f"one of {LOSSES}")

    @property
    def epsilon_schedule(self) -> EpsilonSchedule:
        return EpsilonSchedule.from_config(self)


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> EpsilonGreedyAgent:
    """Nature Q-network (conv torso for frames, MLP for vectors), optionally dueling, epsilon-greedy."""
    return q_agent(config, observation_space, action_space)


def q_agent(
    config: Config,
    observation_space: gym.Space,
    action_space: gym.Space,
    n_atoms: int = 1,
    support: torch.Tensor | None = None,
) -> EpsilonGreedyAgent:
    """The epsilon-greedy agent of ``config``'s Q-network; distributional (C51, Rainbow) with
    ``n_atoms`` logits over ``support`` per action, acting on the expected return."""
    require_action_space(action_space, gym.spaces.Discrete, "DQN, C51 and Rainbow each")
    model = QNetwork(
        observation_space.shape,
        action_space.n,
        dueling=config.dueling,
        n_atoms=n_atoms,
        hidden_size=config.hidden_size,
        mlp_hidden_sizes=config.mlp_hidden_sizes,
        conv_torso=config.conv_torso,
    )
    return EpsilonGreedyAgent(model, observation_space, action_space, config.epsilon_schedule, support)


def make_optimizer(config: Config, params: Any) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return adam(params, config.learning_rate, config.optimizer_eps)
    return CenteredRMSprop(
        params, lr=config.learning_rate, alpha=config.rmsprop_alpha, eps=config.optimizer_eps
    )


class CenteredRMSprop(WithoutCompiler, torch.optim.RMSprop):
    """``torch.optim.RMSprop(centered=True)`` (no momentum, no weight decay), the same update in the
    same state layout, stepped with one multi-tensor kernel per operation and without the per-call
    profiling and grouping work of ``Optimizer.step`` (nor the compiler import, ``WithoutCompiler``).

    One difference that cannot change a parameter: the centered second moment is floored at
    ``(eps * 2^-26)^2`` before its square root. Below that floor ``sqrt + eps`` rounds to ``eps`` in
    float32 either way, and the floor keeps the square root off denormal numbers, which parameters
    that have stopped getting gradients (dead ReLU units) reach and which the CPU handles several
    times slower (docs/results/bench_minatar.md, "Where the time goes")."""

    def __init__(self, params: Any, lr: float, alpha: float, eps: float, **settings: Any) -> None:
        """``settings``: the rest of ``RMSprop``'s defaults, so that ``type(opt)(groups, **opt.defaults)``
        rebuilds this optimizer; only the ones this step implements are accepted."""
        unsupported = {
            key: value
            for key, value in settings.items()
            if value != {"centered": True}.get(key, torch.optim.RMSprop([torch.zeros(1)]).defaults.get(key))
        }
        if unsupported:
            raise ValueError(f"CenteredRMSprop: unsupported settings {unsupported}")
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, centered=True)

    @run_step_hooks
    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise ValueError("CenteredRMSprop.step takes no closure")
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = []
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(())
                    state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                states.append(state)
            grads = [p.grad for p in params]
            square_avgs = [s["square_avg"] for s in states]
            grad_avgs = [s["grad_avg"] for s in states]
            alpha, eps = group["alpha"], group["eps"]
            torch._foreach_add_([s["step"] for s in states], 1)
            torch._foreach_mul_(square_avgs, alpha)
            torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
            torch._foreach_lerp_(grad_avgs, grads, 1 - alpha)
            avg = torch._foreach_addcmul(square_avgs, grad_avgs, grad_avgs, value=-1)
            floor = (eps * 2.0**-26) ** 2
            if floor >= torch.finfo(torch.float32).tiny:
                torch._foreach_clamp_min_(avg, floor)
            torch._foreach_sqrt_(avg)
            torch._foreach_add_(avg, eps)
            torch._foreach_addcdiv_(params, grads, avg, value=-group["lr"])


def loss(config: Config, model: Any, target_model: Any, batch: NamedArrays, mode: LossMode) -> LossOut:
    """Weighted TD loss of a minibatch -> (loss, |TD error| [batch] for priorities, diagnostics)."""
    q = select_action_values(model(batch.observation), batch.action)
    with torch.no_grad():
        q_target_next = target_model(batch.next_observation)
        if config.double:
            q_online_next = model(batch.next_observation)
            y = double_q_learning_target(batch.return_n, batch.discount_n, q_target_next, q_online_next)
        else:
            y = q_learning_target(batch.return_n, batch.discount_n, q_target_next)
    td_error = q - y
    elementwise = huber_loss(td_error) if config.loss == "huber" else squared_loss(td_error)
    weighted = (batch.is_weights * elementwise).mean()
    td_abs = td_error.detach().abs()
    if not mode.measure:
        return LossOut(weighted, td_abs, {})
    return LossOut(weighted, td_abs, {"q_mean": q.detach().mean(), "td_abs_mean": td_abs.mean()})


class Algo(QReplayLearner):
    """DQN learner: replay, target network, optimizer (see the module docstring)."""

    credit_key = "update_credit"
    loss_fn = staticmethod(loss)

    # Reported on every optimize call (NaN before learning starts): loss, mean Q(s, a) of the
    # minibatch, mean |TD error|, gradient norm before clipping.
    diagnostic_keys: tuple[str, ...] = ("loss", "q_mean", "td_abs_mean", "grad_norm")

    def make_optimizer(self, params: Any) -> torch.optim.Optimizer:
        return make_optimizer(self.config, params)

    @staticmethod
    def check_replay(config: Config, num_envs: int, observation: np.ndarray) -> None:
        """``ValueError`` when ``build_replay`` would find the replay too small for one transition
        (``registry.check_replay``: planning asks before any job runs)."""
        transition_rows(config.replay_size_steps, num_envs, observations_for(observation), config.n_step)

    @staticmethod
    def replay_step_bytes(config: Config, action: np.ndarray) -> float:
        """Bytes per env step ``build_replay``'s replay keeps beside the ring's own fields
        (``registry.replay_bytes``): the n-step fields and its selector's arrays, one item per step."""
        selector = PrioritizedSelector if config.prioritized else UniformSelector
        return NSTEP_STEP_BYTES + selector.ITEM_BYTES

    def build_replay(self, example: NamedArrays) -> ReplayBuffer:
        """n-step transition storage (single frames for Atari stacks) x uniform or prioritized sampling."""
        c = self.config
        storage = self.new_storage(TransitionStorage, example, n_step=c.n_step, gamma=c.discount)
        if c.prioritized:
            selector: UniformSelector | PrioritizedSelector = PrioritizedSelector(
                storage.num_items,
                alpha=c.priority_alpha,
                beta=c.priority_beta_start,
                beta_final=1.0,
                beta_anneal_draws=c.priority_beta_anneal_updates,
                seed=self.selector_seed(),
            )
        else:
            selector = UniformSelector(storage.num_items, seed=self.selector_seed())
        return ReplayBuffer(storage, selector)

    # --- the loop -------------------------------------------------------------------------------------
    def take_samples(self, samples: NamedArrays) -> int:
        """Append the batch; once warm, one update is due per ``env_steps_per_update`` env steps."""
        self.append_samples(samples)
        if not self.warm:
            return 0
        self.credit += samples.reward.numel()
        n_updates, self.credit = divmod(self.credit, self.config.env_steps_per_update)
        return n_updates

    def append_samples(self, samples: NamedArrays) -> None:
        """Add a [T, B] sampler batch to the replay (Contract 4's async extension)."""
        self.ensure_replay(samples).append(samples)
        self.replay_steps += samples.reward.numel()

    def draw_spec(self) -> tuple[int, bool]:
        return self.config.batch_size, self.config.prioritized

    def opt_info(self, n_updates: int, diagnostics: dict[str, float]) -> OptInfo:
        trained = n_updates * self.config.batch_size
        return OptInfo(
            updates=n_updates, samples_trained=trained, samples_replayed=trained, diagnostics=diagnostics
        )
