"""Packed learners: the members' updates as one computation over stacked parameters.

Each learner wraps the K member algorithms a packed run built (one per seed, each exactly as a
single run builds it) and is the gradient step of their family's update loop (``algorithms.learners``:
``replay_updates``, ``minibatch_epochs``, ``qpg_update``, the loops single runs use): every member
keeps its own replay, update schedule, counters and random draws, and runs its single run's loss
functions (the algorithm module's ``loss``, or ``critic_loss`` and ``actor_loss``, given the member's
slice of the stacked parameters as its networks and mapped over the members by ``torch.func``);
what the members share is one forward and backward pass over stacked networks and one optimizer
step over stacked parameters.

``take(k, env_steps, samples)`` gives member k its sampler batch at the run's env step, right after
it sampled and with its global RNG state current (``runner.MemberRng``), so that it draws what its
single run draws (its replay selector's seed, PPO's minibatch permutations); ``update(members,
taken)`` then runs the packed updates of the ``members`` (indices) still training from what each
``take`` returned, and returns one ``(OptInfo, failure)`` per member, ``failure`` a message when
that member's loss was not finite (the member stops; the others' computations never read its slices).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from algorithms import registry
from algorithms.algos import ppo
from algorithms.arrays import NamedArrays
from algorithms.learners.common import OptInfo, nonfinite_loss
from algorithms.learners.policy_gradient import minibatch_epochs
from algorithms.learners.q_replay import Draw, QReplayLearner, replay_updates
from algorithms.learners.qpg import Diagnostics, Noise, QpgAlgo, QpgModels, qpg_update
from algorithms.packed.optim import MemberOptimizer, stacked_optimizer
from algorithms.packed.stack import (
    StackedParameters,
    clip_member_gradients,
    flatten,
    member_gradients,
    stack_members,
    unflatten,
)


class PpoTaken(NamedTuple):
    """What a PPO member's ``take`` prepares: its training batch, its minibatch indices by epoch and
    the schedule's values at its env step (a ``ppo.Schedule``)."""

    batch: NamedArrays
    orders: list[tuple[torch.Tensor, ...]]
    now: ppo.Schedule


class PackedLearner:
    """What the packed learners share: the stacked online parameters and their optimizer, installed
    in each member algorithm (``MemberOptimizer``) so its checkpoint holds its own slice."""

    def __init__(
        self, algos: Sequence[Any], models: Sequence[torch.nn.Module], clip_grad_norm: float
    ) -> None:
        self.algos = list(algos)
        self.n_members = len(self.algos)
        self.online = StackedParameters(models, requires_grad=True)
        self.optimizer = stacked_optimizer(
            [a.optimizer for a in self.algos], list(self.online.params.values())
        )
        for k, algo in enumerate(self.algos):
            algo.optimizer = MemberOptimizer(self.optimizer, k)
        self.clip_grad_norm = clip_grad_norm

    def apply_gradients(self, grads: dict[str, torch.Tensor], measure: bool = True) -> torch.Tensor | None:
        """Install the members' gradients, clip each member's, take the optimizer step; returns the
        gradient norms before clipping [K]. With clipping off they are only a diagnostic: computed
        where ``measure`` (else None), as a single run's ``QReplayLearner.clip_gradients``."""
        for name, param in self.online.params.items():
            param.grad = grads[name]
        norms = None
        if measure or math.isfinite(self.clip_grad_norm):
            norms = clip_member_gradients(self.online.params, self.clip_grad_norm)
        self.optimizer.step()
        return norms


class PackedQLearner(PackedLearner):
    """The replay-based Q-learners (``QReplayLearner``: DQN, C51, Rainbow, R2D1), packed: their update
    loop (``replay_updates``) with this learner as its gradient step.

    One update: each member draws its own minibatch from its own replay (uniform, or prioritized
    from its own sum tree), the members' losses and gradients come from one vmapped call of the
    algorithm's ``loss``, one optimizer step follows, each member writes its new priorities, and the
    hard target update (all members reach the period together) is one copy of the stacks.
    """

    # A member whose loss is not finite stops; the others' computations never read its slices.
    stops_failed = True

    def __init__(self, algos: Sequence[Any]) -> None:
        super().__init__(algos, [a.model for a in algos], algos[0].clip_grad_norm)
        self.target = StackedParameters([a.target_model for a in self.algos], requires_grad=False)
        template = self.algos[0]
        self.device = template.agent.device

        def member_loss(params, buffers, target_params, target_buffers, flat_batch, mode):
            loss, priorities, info = template.loss_fn(
                template.config,
                self.online.call({**params, **buffers}),
                self.target.call({**target_params, **target_buffers}),
                unflatten(flat_batch),
                mode,
            )
            return loss, (loss.detach(), priorities, info)

        # The mode is the same for every member (None: not mapped).
        self.gradients = member_gradients(member_loss, in_dims=(0, 0, 0, 0, 0, None))

    def take(self, k: int, env_steps: int, samples: NamedArrays) -> int:
        """Member ``k`` appends its batch to its replay; the updates it now owes (counted from the
        batch, not from the run's ``env_steps``)."""
        return self.algos[k].take_samples(samples)

    def update(self, members: Sequence[int], taken: Sequence[int]) -> list[tuple[OptInfo, str | None]]:
        if len(set(taken)) > 1:
            raise RuntimeError(
                f"packed members owe different numbers of updates {taken}; they must be in lockstep"
            )
        n_updates = taken[0]
        if n_updates == 0 or not self.algos[members[0]].warm:
            return [(self.algos[k].learn(0), None) for k in members]
        diagnostics, failures = replay_updates(self.algos, members, n_updates, self)
        return [(self.algos[k].opt_info(n_updates, diagnostics[k]), failures.get(k)) for k in members]

    def batch(self, draws: list[Draw]) -> NamedArrays:
        """The members' minibatches stacked, [K, ...]; a stopped member's too (fixed shapes)."""
        return stack_members([data.replace(is_weights=w) for data, _, w in draws]).to_torch(self.device)

    def gradient_update(
        self, batch: NamedArrays, measure: bool
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One vmapped gradient of the members' losses and one step of the stacked optimizer."""
        template = self.algos[0]
        mode = template.loss_mode(template.config, batch, measure=measure, traced=True)
        grads, (loss, priorities, info) = self.gradients(
            self.online.params,
            self.online.buffers,
            self.target.params,
            self.target.buffers,
            flatten(batch),
            mode,
        )
        norms = self.apply_gradients(grads, measure)
        if norms is not None:
            info["grad_norm"] = norms
        info["loss"] = loss
        return info, priorities

    def sync_targets(self) -> None:
        self.target.copy_from(self.online)


class PackedPpoLearner(PackedLearner):
    """PPO (feed-forward policies), packed: each member's GAE, its own minibatch permutations (drawn
    from its own RNG state, as its single run draws them), and per minibatch one vmapped ``ppo.loss``
    and one optimizer step for all members. PPO's KL early stop would let members take different
    numbers of steps, so packing needs ``target_kl = 0`` (``check_packable``)."""

    def __init__(self, algos: Sequence[Any]) -> None:
        super().__init__(algos, [a.agent.model for a in algos], algos[0].config.clip_grad_norm or math.inf)
        config = self.algos[0].config
        self.now = ppo.schedule(config, 0)  # the current call's (``update``)

        def member_loss(params, buffers, flat_minibatch, now):
            total, values = ppo.loss(
                config, self.online.call({**params, **buffers}), unflatten(flat_minibatch), now
            )
            return total, {**values, "loss": total.detach()}

        self.gradients = member_gradients(member_loss, in_dims=(0, 0, 0, None))

    def take(self, k: int, env_steps: int, samples: NamedArrays) -> PpoTaken:
        """Member ``k``'s training batch (its advantages), its minibatch permutations of every epoch,
        drawn from its RNG as its single run draws them, and the schedule's values at ``env_steps``."""
        algo = self.algos[k]
        batch, n_items = algo.training_batch(samples)
        orders = [ppo.minibatch_indices(n_items, algo.n_minibatches) for _ in range(algo.config.epochs)]
        return PpoTaken(batch, orders, ppo.schedule(algo.config, env_steps))

    def update(self, members: Sequence[int], taken: Sequence[PpoTaken]) -> list[tuple[OptInfo, str | None]]:
        """The members' epochs (``minibatch_epochs``) with this learner as their gradient step."""
        algos = self.algos
        prepared = dict(zip(members, taken))
        lead = algos[members[0]]
        self.now = taken[0].now  # the members are at the same env step (lockstep)
        for group in self.optimizer.param_groups:
            group["lr"] = self.now.learning_rate
        # A stopped member computes on a live member's data: fixed shapes, results unread.
        filler = prepared[members[0]]
        member_data = [prepared.get(k, filler) for k in range(self.n_members)]
        orders = [
            [[(t.batch, t.orders[epoch][j]) for t in member_data] for j in range(lead.n_minibatches)]
            for epoch in range(lead.config.epochs)
        ]
        keys = (*ppo.MINIBATCH_DIAGNOSTICS, "loss")
        totals, updates, _ = minibatch_epochs(self, orders, keys, target_kl=0.0)
        values = {key: total.tolist() for key, total in totals.items()}
        results = []
        for k in members:
            member = {key: values[key][k] / updates for key in keys}
            loss = member.pop("loss")
            failure = None if math.isfinite(loss) else nonfinite_loss(loss, member, updates)
            results.append((algos[k].opt_info(prepared[k].batch, updates, member, False, self.now), failure))
        return results

    def minibatch_gradients(
        self, minibatches: list[tuple[NamedArrays, torch.Tensor]]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The members' gradients on their minibatches (each member's batch and indices), one vmapped
        call, and their diagnostics [K]."""
        device = self.algos[0].agent.device
        stacked = stack_members(
            [algo.minibatch(batch, idx.to(device)) for algo, (batch, idx) in zip(self.algos, minibatches)]
        )
        return self.gradients(self.online.params, self.online.buffers, flatten(stacked), self.now)


class PackedQpgLearner:
    """DDPG, TD3 and SAC (``QpgAlgo``), packed: each member's own uniform replay and minibatches, its
    update's random draws (``draw_noise_fn``: target smoothing, the policy's reparameterisation) made in
    ``take`` with its RNG state current, as its single run makes them; per update one vmapped critic
    gradient and one stacked Adam step, then (when due) one vmapped actor (and temperature) gradient
    over the updated critics, one stacked Adam step and the Polyak averages of the stacks."""

    def __init__(self, algos: Sequence[Any]) -> None:
        self.algos = list(algos)
        self.n_members = len(self.algos)
        self.members: Sequence[int] = range(self.n_members)  # those training, set by each ``update``
        template = self.algos[0]
        self.actor = StackedParameters([a.actor for a in self.algos], requires_grad=True)
        self.critic = StackedParameters([a.critic.q for a in self.algos], requires_grad=True)
        self.critic_target = StackedParameters([a.critic.target for a in self.algos], requires_grad=False)
        self.actor_target = (
            StackedParameters([a.actor_target for a in self.algos], requires_grad=False)
            if template.actor_target is not None
            else None
        )
        # SAC's temperature: a [K] stack, member k's ``log_alpha`` its slice.
        self.temperature = (
            StackedParameters([a.temperature for a in self.algos], requires_grad=True)
            if template.temperature is not None
            else None
        )
        actor_params = list(self.actor.params.values())
        # SAC with a tuned temperature steps it in the actor's optimizer (its second group).
        self.tuned_alpha = len(template.actor_optimizer.param_groups) > 1
        if self.tuned_alpha:
            actor_params.append(self.temperature.params["log_alpha"])
        self.critic_optimizer = stacked_optimizer(
            [a.critic.optimizer for a in self.algos], list(self.critic.params.values())
        )
        self.actor_optimizer = stacked_optimizer([a.actor_optimizer for a in self.algos], actor_params)
        for k, algo in enumerate(self.algos):
            algo.critic.optimizer = MemberOptimizer(self.critic_optimizer, k)
            algo.actor_optimizer = MemberOptimizer(self.actor_optimizer, k)
        config, mode = template.config, template.mode
        critic_loss_fn, actor_loss_fn = template.critic_loss_fn, template.actor_loss_fn

        def models(networks: dict[str, Any]) -> QpgModels:
            """One member's networks as the losses take them (``networks``: by name, as in ``inputs``)."""
            actor_target = self.actor_target
            return QpgModels(
                actor=self.actor.call(networks["actor"]),
                critic=self.critic.call(networks["critic"]),
                critic_target=self.critic_target.call(networks["critic_target"]),
                actor_target=None if actor_target is None else actor_target.call(networks["actor_target"]),
                log_alpha=networks.get("log_alpha"),
            )

        def critic_loss(critic, others, flat_batch, noise, mode):
            return critic_loss_fn(
                config, models({**others, "critic": critic}), unflatten(flat_batch), noise, mode
            )

        def actor_loss(trained, others, flat_batch, noise, mode):
            return actor_loss_fn(config, models({**others, **trained}), unflatten(flat_batch), noise, mode)

        # Only the differentiated first argument gets gradients; the mode is every member's (not mapped).
        self.critic_gradients = member_gradients(critic_loss, in_dims=(0, 0, 0, 0, None))
        self.actor_gradients = member_gradients(actor_loss, in_dims=(0, 0, 0, 0, None))
        self.mode = mode

    def take(self, k: int, env_steps: int, samples: NamedArrays) -> list[tuple[NamedArrays, Noise]]:
        """Member ``k`` appends its batch to its replay and draws the minibatches and random draws of
        the updates it now owes (``QpgAlgo.draws``), in its single run's order."""
        algo = self.algos[k]
        return list(algo.draws(algo.replay.append(samples)))

    def update(
        self, members: Sequence[int], taken: Sequence[list[tuple[NamedArrays, dict[str, torch.Tensor]]]]
    ) -> list[tuple[OptInfo, str | None]]:
        """The members' updates: each one ``qpg_update`` with this learner as its gradient step."""
        if len({len(t) for t in taken}) > 1:
            raise RuntimeError(
                f"packed members owe different numbers of updates {[len(t) for t in taken]}; "
                "they must be in lockstep"
            )
        self.members = members
        own = dict(zip(members, taken))
        filler = taken[0]  # a stopped member computes on a live member's data: fixed shapes, unread
        infos: dict[int, list[dict[str, float]]] = {k: [] for k in members}
        failures: dict[int, str] = {}
        for i in range(len(filler)):
            batches = [own.get(k, filler)[i] for k in range(self.n_members)]
            batch = flatten(stack_members([b for b, _ in batches]))
            noise = {key: torch.stack([n[key] for _, n in batches]) for key in batches[0][1]}
            info = qpg_update(self, batch, noise)
            values = {key: value.tolist() for key, value in info.items()}
            for k in members:
                if k in failures:
                    continue
                member = {key: values[key][k] for key in values}
                loss = member.get("critic_loss", 0.0) + member.get("actor_loss", 0.0)
                if not math.isfinite(loss):
                    failures[k] = nonfinite_loss(loss, member, len(infos[k]) + 1)
                infos[k].append(member)
        return [(self.algos[k].opt_info(infos[k]), failures.get(k)) for k in members]

    def critic_update(self, batch: dict[str, Any], noise: Noise) -> Diagnostics:
        """One vmapped critic gradient over the members and one stacked Adam step."""
        grads, info = self.critic_gradients(
            self.critic.tensors(),
            self.inputs("actor", "actor_target", "critic_target", "log_alpha"),
            batch,
            noise,
            self.mode,
        )
        self.apply(self.critic_optimizer, self.critic.params, grads)
        return info

    def count_update(self) -> bool:
        """Every training member counts its update; they agree on the actor's turn (lockstep)."""
        due = {self.algos[k].count_update() for k in self.members}
        if len(due) > 1:
            raise RuntimeError(
                "packed members disagree on whether the actor updates; they must be in lockstep"
            )
        return due.pop()

    def actor_update(self, batch: dict[str, Any], noise: Noise) -> Diagnostics:
        """One vmapped actor (and temperature) gradient over the updated critics, one stacked Adam step."""
        trained, params = {"actor": self.actor.tensors()}, dict(self.actor.params)
        untrained = ["critic", "actor_target", "critic_target", "log_alpha"]
        if self.tuned_alpha:
            trained["log_alpha"] = params["log_alpha"] = self.temperature.params["log_alpha"]
            untrained.remove("log_alpha")
        grads, info = self.actor_gradients(trained, self.inputs(*untrained), batch, noise, self.mode)
        self.apply(self.actor_optimizer, params, {**grads.pop("actor"), **grads})
        return info

    def inputs(self, *names: str) -> dict[str, Any]:
        """The named networks' stacked tensors (``log_alpha``: SAC's temperature), as values the
        gradient computation does not differentiate; absent networks are left out."""
        stacks = {
            "actor": self.actor,
            "critic": self.critic,
            "actor_target": self.actor_target,
            "critic_target": self.critic_target,
        }
        found: dict[str, Any] = {}
        for name in names:
            if name == "log_alpha":
                if self.temperature is not None:
                    found[name] = self.temperature.params["log_alpha"].detach()
            elif stacks[name] is not None:
                found[name] = {key: value.detach() for key, value in stacks[name].tensors().items()}
        return found

    @staticmethod
    def apply(optimizer: torch.optim.Optimizer, params: dict[str, Any], grads: dict[str, Any]) -> None:
        """Install ``grads`` on ``params`` (by name) and step ``optimizer``."""
        for name, param in params.items():
            param.grad = grads[name]
        optimizer.step()

    @torch.no_grad()
    def update_targets(self) -> None:
        """Every member's Polyak averages at once (``QpgAlgo.update_targets`` on the stacks)."""
        tau = self.algos[0].config.tau
        pairs = [(self.critic_target, self.critic)]
        if self.actor_target is not None:
            pairs.append((self.actor_target, self.actor))
        for target, online in pairs:
            names = list(target.params)
            torch._foreach_lerp_([target.params[n] for n in names], [online.params[n] for n in names], tau)
            for name, buffer in target.buffers.items():
                buffer.copy_(online.buffers[name])


def learner_class(algo: str) -> Any:
    """The packed learner of algorithm ``algo`` (``ValueError`` when it has none)."""
    cls = registry.algo_module(algo).Algo
    if issubclass(cls, QReplayLearner):
        return PackedQLearner
    if issubclass(cls, ppo.Algo):
        return PackedPpoLearner
    if issubclass(cls, QpgAlgo):
        return PackedQpgLearner
    raise ValueError(
        f"packing: algorithm {algo!r} has no packed learner "
        "(packable: DQN family, R2D1, feed-forward PPO, DDPG, TD3, SAC)"
    )
