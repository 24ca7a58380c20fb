"""R2D1: R2D2's learner (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning", ICLR) run by one process, as in rlpyt (``rlpyt/algos/dqn/r2d1.py``).

One update on B sequences of ``burn_in + sequence_length + n_step`` steps from prioritized sequence
replay, each starting from the recurrent state stored when it was collected (Sec. 3, "stored state"):

    burn-in:   run online and target nets over the first ``burn_in`` steps without gradient,
               starting from the stored state, to refresh it (Sec. 3, "burn-in")
    values:    Q(s_t, .) and Q_target(s_t, .) over the remaining steps
    target:    y_t = h(G_t + discount_t * h^-1(Q_target(s_{t+m}, argmax_a Q(s_{t+m}, a))))
               n-step double Q-learning with value rescaling h instead of reward clipping (Sec. 2.3)
    loss:      mean over sequences of w_b * mean_t 0.5 (Q(s_t, a_t) - y_t)^2 over the trained steps
    priority:  p_b = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|, eta = 0.9 (Sec. 2.3)

Sequences are cut from each env's continuous stream (``replay/sequences.py``). Where an episode
begins inside a sequence, the recurrent state is reset to zeros at that step (burn-in included),
so no memory crosses an episode boundary and every stored step is trained on; n-step windows stop
at episode ends. (rlpyt instead ran the LSTM straight through and masked the loss after the first
episode end.)

New sequences enter the replay with priorities computed the same way from the sampler's own
Q-values (R2D2 Sec. 2.3: actors compute the initial priorities), over the n-step TD errors of the
sequence's trained steps. Defaults are R2D2's Table 2; the two values R2D2 does not give are
marked "inherited": the per-actor epsilons (Ape-X, via Table 2's caption) and the gradient-norm
clip of 80 (rlpyt's default, attributed there to the R2D2 authors).

**rlpyt's 2019 deviations**, each a switch, all off by default (reference SOURCES, "rlpyt's 2019
R2D1 runs deviate from R2D2"):

* ``swap_priority_exponents``: priority exponent 0.6 and importance-sampling exponent 0.9 (rlpyt's
  class defaults until the config fix of 2019-08-13) instead of 0.9 and 0.6;
* ``initial_priority_one_step``: initial priorities from 1-step instead of n-step TD errors;
* ``initial_priority_no_alpha``: initial priorities enter the replay without the priority exponent
  that updated priorities get (rlpyt passed them to the sum tree as they were);
* ``initial_priority_half_segment``: an initial priority from only the first (1) or second (2) half
  of the sequence's trained steps (rlpyt's ``input_priority_shift``: its sampler batch was half a
  sequence long); 0 = the whole sequence;
* ``replay_ratio_counts_burnin``: the replay-ratio target counts burn-in steps as replayed, so
  fewer updates run per env step ((burn_in + T) x B per update, rlpyt's counting);
* ``nstep_done_bug``: the n-step done keeps only the 1-step done, bootstrapping across episode ends
  (rlpyt before PR #182; ``algorithms.functional.returns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from algorithms.agents.dqn_agents import R2D1Agent
from algorithms.agents.epsilon import EpsilonSchedule
from algorithms.algos.r2d1_targets import InitialPriorities, targets
from algorithms.arrays import NamedArrays, concatenate
from algorithms.configs import check_field, check_ranges
from algorithms.functional.priorities import sequence_priority
from algorithms.functional.td import select_action_values
from algorithms.functional.value_rescaling import VALUE_TRANSFORMS
from algorithms.learners.common import OptInfo, require_action_space
from algorithms.learners.q_replay import EveryStep, LossMode, LossOut, QReplayLearner, TimeLimitSteps
from algorithms.models.r2d1_model import R2D1Model
from algorithms.models.torsos import CONV_TORSOS
from algorithms.replay.buffer import ReplayBuffer
from algorithms.replay.observations import observations_for
from algorithms.replay.selectors import PrioritizedSelector
from algorithms.replay.sequences import SequenceStorage, sequence_rows


@dataclass(frozen=True)
class Config:
    """R2D1 settings. The defaults are ``repro/configs/settings/r2d2_paper.toml``'s values (R2D2,
    Kapturowski et al. 2019, Table 2, Sec. 2.3 and the Appendix; each value's source is there), checked
    equal by tests/test_config_defaults.py."""

    discount: float = 0.997
    n_step: int = 5
    sequence_length_steps: int = 80  # trained steps per sequence
    burn_in_steps: int = 40
    sequence_period_steps: int = 40  # a sequence starts every 40 steps: adjacent ones overlap by 40
    batch_size_sequences: int = 64
    replay_size_steps: int = 4_000_000
    learning_starts_steps: int = 100_000  # not in R2D2; rlpyt's atari_r2d1 config (min_steps_learn=1e5)
    # Trained steps replayed per env step ("about 0.8", R2D2 Appendix; what it counted is open, see
    # docs/step_accounting.md); ``replay_ratio_counts_burnin`` switches to rlpyt's counting.
    replay_ratio: float = 0.8
    target_update_period_updates: int = 2_500
    learning_rate: float = 1e-4
    optimizer_eps: float = 1e-3
    clip_grad_norm: float = 80.0  # inherited: rlpyt's default, not in the R2D2 paper; 0 = off
    priority_alpha: float = 0.9
    priority_beta: float = 0.6  # camera-ready Table 2 (the under-review version used no IS weights)
    priority_eta: float = 0.9
    value_rescaling: str = "signed_hyperbolic"  # h(x) = sign(x)(sqrt(|x|+1)-1) + eps x; "identity" = off
    value_rescaling_eps: float = 1e-3
    # Exploration: fixed per-actor epsilons 0.4^(1 + 7 i / (N - 1)), inherited from Ape-X (Horgan et
    # al. 2018, Sec. 4.1) through R2D2 Table 2's caption.
    eps_start: float = 1.0
    eps_final: float = 0.01
    eps_decay_steps: int = 0
    eps_per_env: Literal["same", "apex", "log_spaced"] = "apex"
    eps_final_min: float = 0.0005  # env 0's final epsilon with "log_spaced" (rlpyt's eps_final_min)
    eps_eval: float = 0.0  # R2D2 does not state one: greedy
    # Network (R2D2 Appendix "Hyper-parameters"): conv torso -> LSTM 512 -> dueling 512.
    # ``conv_torso``: the convolutions for (C, H, W) observations (``models.torsos.CONV_TORSOS``).
    conv_torso: str = "nature"
    lstm_size: int = 512
    # A fully connected layer between the conv torso and the LSTM: none in R2D2 (its Appendix puts the
    # LSTM after the conv torso), 512 in rlpyt's atari_r2d1_model.py (rlpyt_r2d1_published); 0 = none.
    fc_size: int = 0
    head_hidden_size: int = 512
    mlp_hidden_sizes: tuple[int, ...] = (64, 64)  # torso for vector observations
    # rlpyt 2019 deviations (module docstring), all off = R2D2.
    swap_priority_exponents: bool = False
    initial_priority_one_step: bool = False
    initial_priority_no_alpha: bool = False
    initial_priority_half_segment: int = 0
    replay_ratio_counts_burnin: bool = False
    nstep_done_bug: bool = False

    def __post_init__(self) -> None:
        check_ranges(
            self,
            unit=("discount", "priority_beta", "priority_eta"),
            positive=("replay_ratio", "learning_rate", "optimizer_eps", "value_rescaling_eps"),
            positive_ints=(
                "n_step",
                "sequence_length_steps",
                "sequence_period_steps",
                "batch_size_sequences",
                "replay_size_steps",
                "target_update_period_updates",
                "lstm_size",
                "head_hidden_size",
            ),
            non_negative=(
                "burn_in_steps",
                "learning_starts_steps",
                "eps_decay_steps",
                "fc_size",
                "clip_grad_norm",
                "priority_alpha",
            ),
            sizes=("mlp_hidden_sizes",),
        )
        check_field(
            self,
            self.value_rescaling in VALUE_TRANSFORMS,
            "value_rescaling",
            f"one of {sorted(VALUE_TRANSFORMS)}",
        )
        check_field(
            self,
            self.initial_priority_half_segment in (0, 1, 2),
            "initial_priority_half_segment",
            "0 (whole sequence), 1 (first half) or 2 (second half)",
        )
        check_field(self, self.conv_torso in CONV_TORSOS, "conv_torso", f"one of {CONV_TORSOS}")
        self.epsilon_schedule  # validates the eps_* fields  # noqa: B018

    @property
    def epsilon_schedule(self) -> EpsilonSchedule:
        return EpsilonSchedule.from_config(self)

    @property
    def alpha_beta(self) -> tuple[float, float]:
        """(priority exponent, importance-sampling exponent) in effect (swapped by the rlpyt switch)."""
        if self.swap_priority_exponents:
            return self.priority_beta, self.priority_alpha
        return self.priority_alpha, self.priority_beta

    def effective_values(self) -> dict[str, tuple[Any, str]]:
        """Fields whose value in effect another field sets: ``{field: (value in effect, why)}``.

        ``python -m repro show`` prints them next to the stated values, and a run records them in its
        metadata.json for the report (``algorithms.rundir.declared_effective_values``), so a setting
        that states ``priority_alpha = 0.9`` with the rlpyt swap on does not read as running 0.9.
        """
        if not self.swap_priority_exponents:
            return {}
        alpha, beta = self.alpha_beta
        why = (
            "swap_priority_exponents = true: the priority and importance-sampling exponents trade values "
            "(rlpyt's class defaults before its config fix of 2019-08-13)"
        )
        return {"priority_alpha": (alpha, why), "priority_beta": (beta, why)}

    @property
    def replayed_steps_per_sequence(self) -> int:
        """Steps one sequence counts toward the replay-ratio target (burn-in included by rlpyt)."""
        return self.sequence_length_steps + (self.burn_in_steps if self.replay_ratio_counts_burnin else 0)

    @property
    def sequence_steps(self) -> int:
        """Steps stored per sampled sequence: burn-in, trained steps, and n more for the last targets."""
        return self.burn_in_steps + self.sequence_length_steps + self.n_step


def build_agent(config: Config, observation_space: gym.Space, action_space: gym.Space) -> R2D1Agent:
    require_action_space(action_space, gym.spaces.Discrete, "R2D1")
    model = R2D1Model(
        observation_space.shape,
        action_space.n,
        lstm_size=config.lstm_size,
        fc_size=config.fc_size,
        head_hidden_size=config.head_hidden_size,
        mlp_hidden_sizes=config.mlp_hidden_sizes,
        conv_torso=config.conv_torso,
    )
    return R2D1Agent(model, observation_space, action_space, config.epsilon_schedule)


def unroll(
    config: Config, model: Any, batch: NamedArrays, need_states: bool, stepwise: bool, grad: bool = True
) -> tuple[torch.Tensor, Any]:
    """Q-values [T + n, B, A] of the steps after the burn-in (with per-step states when
    ``need_states``), the state burnt in from the stored one and reset where an episode begins.

    With ``grad`` (the online network) only the T trained steps carry a gradient: the burn-in
    and the n bootstrap steps after them, whose values only pick the double-Q action, run without
    one, so the backward pass skips their rows (a third of the rows past the burn-in at the
    MinAtar scale, T = 10, n = 5). Without ``grad`` (the target network) the whole sequence is one
    pass. The values are those of one pass in every case; each cut costs each layer one more call
    (about 0.7 of 8.7 CPU ms for a target unroll at the MinAtar scale)."""
    burn, trained = config.burn_in_steps, config.sequence_length_steps

    def run(steps: slice, state: Any, states: bool) -> tuple:
        """``model`` over the ``steps`` of ``batch`` from ``state``: (q, next state[, per-step states])."""
        return model(
            batch.observation[steps],
            batch.prev_action[steps],
            batch.prev_reward[steps],
            state,
            reset=batch.episode_start[steps],
            return_states=states,
            stepwise=stepwise,
        )

    if not grad:
        with torch.no_grad():
            q, _, *states = run(slice(None), batch.init_state, need_states)
        return q[burn:], (states[0][burn:] if need_states else None)
    state = batch.init_state
    if burn:
        with torch.no_grad():
            _, state = run(slice(None, burn), state, False)
    q, state, *states = run(slice(burn, burn + trained), state, need_states)
    with torch.no_grad():
        q_tail, _, *tail = run(slice(burn + trained, None), state, need_states)
    return torch.cat([q, q_tail]), (concatenate([states[0], tail[0]]) if need_states else None)


def final_observation_values(
    config: Config,
    model: Any,
    batch: NamedArrays,
    states: NamedArrays,
    where: TimeLimitSteps | None,
    stepwise: bool,
) -> torch.Tensor:
    """Q-values [k, A] at the true final observations of the time-limit steps ``where`` (t, b), or
    with ``where`` None at every step t < T + n - 1 of every sequence, [T + n - 1, B, A]."""
    burn = config.burn_in_steps
    if where is not None:
        t, b = where
        return model(
            batch.final_observation[burn + t, b],
            batch.action[burn + t, b],
            batch.reward[burn + t, b],
            states[t, b],
            stepwise=stepwise,
        )[0]
    steps = slice(burn, burn + config.sequence_length_steps + config.n_step - 1)
    lead = batch.action[steps].shape
    flat = batch[steps].map(lambda x: x.reshape(-1, *x.shape[2:]))
    before = states[: lead[0]].map(lambda x: x.reshape(-1, *x.shape[2:]))
    q = model(flat.final_observation, flat.action, flat.reward, before, stepwise=stepwise)[0]
    return q.reshape(*lead, -1)


def loss_mode(config: Config, batch: NamedArrays, measure: bool, traced: bool) -> LossMode:
    """Where the sequences of ``batch`` ([..., L, B]) have a time limit at which ``loss`` bootstraps
    from the true final observation, read from the data outside the loss: the steps (t, b), or
    under a transform ``EveryStep`` when any sequence has one (the loss cannot read the data there)."""
    time_limits = None
    if "final_observation" in batch:
        burn = config.burn_in_steps
        window = batch.truncated[..., burn : burn + config.sequence_length_steps + config.n_step - 1, :]
        if traced:
            time_limits = EveryStep() if bool(window.any()) else None
        else:
            where = TimeLimitSteps(*torch.nonzero(window, as_tuple=True))
            time_limits = where if where.t.numel() > 0 else None
    return LossMode(measure=measure, traced=traced, time_limits=time_limits)


def loss(config: Config, model: Any, target_model: Any, batch: NamedArrays, mode: LossMode) -> LossOut:
    """Importance-weighted squared TD loss of the trained steps -> (loss, priorities [B], diagnostics)."""
    c = config
    burn, T = c.burn_in_steps, c.sequence_length_steps
    rest = slice(burn, None)
    reward, terminated, truncated = batch.reward[rest], batch.terminated[rest], batch.truncated[rest]
    valid = torch.ones_like(terminated[:T])
    if "final_observation" not in batch:
        # No final frame kept: a window reaching a time limit stops one step before it and bootstraps
        # from the time-limit step's own observation, which is not trained on itself (as in
        # replay/transitions.py).
        cut = torch.zeros_like(truncated)
        cut[:-1] = truncated[1:]
        valid = ~truncated[:T]
        truncated = cut
    need_states = mode.time_limits is not None
    where = mode.time_limits if isinstance(mode.time_limits, TimeLimitSteps) else None
    q_all, states = unroll(c, model, batch, need_states, mode.traced)
    with torch.no_grad():
        q_target_all, target_states = unroll(c, target_model, batch, need_states, mode.traced, grad=False)
        online = q_all.detach().clone()
        if need_states:
            # Windows ending in a time limit at t bootstrap from Q at index t + 1, which holds the next
            # episode's first step: put the true final observation's values there (Pardo et al. 2018).
            online_final = final_observation_values(c, model, batch, states, where, mode.traced)
            target_final = final_observation_values(c, target_model, batch, target_states, where, mode.traced)
            if where is not None:
                online[where[0] + 1, where[1]] = online_final
                q_target_all[where[0] + 1, where[1]] = target_final
            else:
                span = truncated[: T + c.n_step - 1]
                at, after = span.unsqueeze(-1), slice(1, span.shape[0] + 1)
                online[after] = torch.where(at, online_final, online[after])
                q_target_all[after] = torch.where(at, target_final, q_target_all[after])
        best = online.argmax(dim=-1, keepdim=True)  # double Q-learning: the online net selects
        q_bootstrap = torch.cat(
            [q_target_all.gather(-1, best).squeeze(-1), q_target_all.new_zeros(1, q_all.shape[1])]
        )
        y = targets(c, reward, terminated, truncated, q_bootstrap, c.n_step)[:T]
    q = select_action_values(q_all[:T], batch.action[rest][:T])
    delta = q - y
    valid_f = valid.to(delta.dtype)
    weighted = (0.5 * delta**2 * valid_f * batch.is_weights).sum() / valid_f.sum().clamp(min=1.0)
    priorities = sequence_priority(delta.detach(), c.priority_eta, valid, check_valid=not mode.traced)
    if not mode.measure:
        return LossOut(weighted, priorities, {})
    diagnostics = {"q_mean": q.detach().mean(), "td_abs_mean": delta.detach().abs().mean()}
    return LossOut(weighted, priorities, diagnostics)


class Algo(QReplayLearner):
    """R2D1 learner: prioritized sequence replay with stored states, burn-in, target net, Adam."""

    credit_key = "replay_credit"
    credit_type = float  # replayed steps owed to the replay-ratio target
    # Reported on every optimize call (NaN before learning starts).
    diagnostic_keys: tuple[str, ...] = ("loss", "q_mean", "td_abs_mean", "grad_norm")
    # Every update: beside an R2D1 update (tens of ms) the diagnostics cost nothing measurable, and
    # a short run's progress rows hold only a few updates each.
    diagnostic_period = 1
    loss_fn = staticmethod(loss)
    loss_mode = staticmethod(loss_mode)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.initial_priorities = InitialPriorities(self.config, self.batch_spec.B)

    # --- replay -------------------------------------------------------------------------------------
    @staticmethod
    def check_replay(config: Config, num_envs: int, observation: np.ndarray) -> None:
        """``ValueError`` when ``build_replay`` would find the replay too small for one sequence
        (``registry.check_replay``: planning asks before any job runs)."""
        sequence_rows(
            config.replay_size_steps,
            num_envs,
            observations_for(observation),
            config.sequence_steps,
            config.sequence_period_steps,
        )

    @staticmethod
    def replay_step_bytes(config: Config, action: np.ndarray) -> float:
        """Bytes per env step ``build_replay``'s replay keeps beside the ring's own fields
        (``registry.replay_bytes``): the previous action and reward, and the selector's arrays, one item
        per ``sequence_period_steps`` (the stored recurrent states come on top)."""
        return (
            action.nbytes
            + np.dtype(np.float32).itemsize
            + PrioritizedSelector.ITEM_BYTES / config.sequence_period_steps
        )

    def build_replay(self, example: NamedArrays) -> ReplayBuffer:
        c = self.config
        storage = self.new_storage(
            SequenceStorage, example, sequence_length=c.sequence_steps, stride=c.sequence_period_steps
        )
        alpha, beta = c.alpha_beta
        selector = PrioritizedSelector(
            storage.num_items,
            alpha=alpha,
            beta=beta,
            input_priorities_alpha=not c.initial_priority_no_alpha,
            seed=self.selector_seed(),
        )
        return ReplayBuffer(storage, selector)

    def append_samples(self, samples: NamedArrays) -> None:
        """Store a sampler batch and give the sequences it completes their initial priorities
        (also Contract 4's async extension)."""
        self.initial_priorities.append(self.ensure_replay(samples), samples)
        self.replay_steps += samples.reward.numel()

    def replay_extra_state(self) -> dict[str, Any]:
        return self.initial_priorities.state_dict()

    def load_replay_extra_state(self, state: dict[str, Any]) -> None:
        self.initial_priorities.load_state_dict(state)

    # --- the loop -------------------------------------------------------------------------------------
    def take_samples(self, samples: NamedArrays) -> int:
        """Append the batch; once warm, as many updates are due as the replay-ratio target owes."""
        self.append_samples(samples)
        if not self.warm:
            return 0
        c = self.config
        self.credit += c.replay_ratio * samples.reward.numel()
        per_update = c.batch_size_sequences * c.replayed_steps_per_sequence
        n_updates = int(self.credit // per_update)
        self.credit -= n_updates * per_update
        return n_updates

    def draw_spec(self) -> tuple[int, bool]:
        return self.config.batch_size_sequences, True

    def opt_info(self, n_updates: int, diagnostics: dict[str, float]) -> OptInfo:
        c = self.config
        sequences = n_updates * c.batch_size_sequences
        return OptInfo(
            updates=n_updates,
            samples_trained=sequences * c.sequence_length_steps,
            samples_replayed=sequences * (c.sequence_length_steps + c.burn_in_steps),
            diagnostics=diagnostics,
        )
