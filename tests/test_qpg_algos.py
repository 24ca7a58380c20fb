"""DDPG, TD3 and SAC: configs, agents, and a one-step continuous bandit probe with a known optimum.

The probe: observation s ~ U(-1, 1)^2, action a in [-1, 1]^2 (the box), reward -|a - s * [1, -0.5]|^2,
every episode one step long (terminated). The optimal policy is a*(s) = s * [1, -0.5] with value 0,
so a broken critic target, actor loss or squashing correction shows as a policy far from a*.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from algorithms.agents.qpg_agents import DeterministicAgent, SquashedGaussianAgent
from algorithms.algos import ddpg, sac, td3
from algorithms.arrays import BatchSpec, NamedArrays
from algorithms.functional.policy_losses import (
    clipped_double_q_target,
    polyak_update_,
    q_target,
    sac_temperature_loss,
    smoothed_target_action,
    soft_q_target,
)
from algorithms.learners.common import adam
from algorithms.models.ensemble import QEnsemble
from algorithms.models.policies import StateActionQNetwork
from repro.settings import setting_configs

torch.set_num_threads(1)

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
SLOPE = torch.tensor([1.0, -0.5])


def _bandit_batch(agent, B, generator):
    obs = torch.rand(B, 2, generator=generator) * 2 - 1
    action, agent_info, _ = agent.step(obs, torch.zeros(B, 2), torch.zeros(B), None)
    reward = -((action - obs * SLOPE) ** 2).sum(-1)
    done = torch.ones(1, B, dtype=torch.bool)
    next_obs = torch.rand(B, 2, generator=generator) * 2 - 1
    return NamedArrays(
        observation=obs[None],
        action=action[None],
        reward=reward[None],
        terminated=done,
        truncated=torch.zeros(1, B, dtype=torch.bool),
        final_observation=obs[None],
        prev_action=torch.zeros(1, B, 2),
        prev_reward=torch.zeros(1, B),
        agent_info=agent_info[None] if agent_info.fields else agent_info,
        env_info=NamedArrays(
            life_loss=torch.zeros(1, B, dtype=torch.bool),
            raw_reward=reward[None],
            episode_return=reward[None],
            episode_length=torch.ones(1, B, dtype=torch.int64),
        ),
        bootstrap=NamedArrays(
            observation=next_obs, prev_action=torch.zeros(B, 2), prev_reward=torch.zeros(B)
        ),
    )


def _train_on_bandit(module, config, steps, B=8, seed=0):
    torch.manual_seed(seed)
    agent = module.build_agent(config, OBS, ACT)
    algo = module.Algo(config, agent, 1, BatchSpec(1, B))
    g = torch.Generator().manual_seed(seed)
    infos = []
    for itr in range(steps // B):
        agent.set_mode("sample", itr * B)
        samples = _bandit_batch(agent, B, g)
        agent.set_mode("train", (itr + 1) * B)
        infos.append(algo.optimize(itr, samples))
    agent.set_mode("eval")
    test_obs = torch.rand(256, 2, generator=g) * 2 - 1
    action, _, _ = agent.step(test_obs, None, None, None)
    return algo, infos, ((action - test_obs * SLOPE) ** 2).sum(-1).mean().item()


SMALL = {"hidden_sizes": (32, 32), "random_steps": 128, "learning_starts_steps": 128, "batch_size": 64}


@pytest.mark.slow
@pytest.mark.parametrize(
    "module,config",
    [
        (td3, td3.Config(**SMALL)),
        (ddpg, ddpg.Config(**SMALL)),
        (
            sac,
            sac.Config(
                **SMALL, actor_learning_rate=1e-3, critic_learning_rate=1e-3, alpha_learning_rate=1e-3
            ),
        ),
    ],
    ids=["td3", "ddpg", "sac"],
)
def test_bandit_probe_finds_the_optimal_action(module, config):
    algo, infos, error = _train_on_bandit(module, config, steps=640)
    # A uniform-random policy's squared error is about 1.1, the best constant action's about 0.42.
    # (SAC's is the largest of the three: its deterministic eval action is the mean of a policy that
    # still keeps entropy.)
    assert error < 0.05, error
    assert sum(i.updates for i in infos) == 640 - 128  # one update per env step once warm
    assert infos[-1].samples_trained == 8 * 64
    assert {"critic_loss", "actor_loss", "q_mean"} <= set(infos[-1].diagnostics)


def test_sac_temperature_moves_toward_the_entropy_target():
    config = sac.Config(**SMALL, target_entropy=5.0)  # unreachably high: alpha must grow
    algo, infos, _ = _train_on_bandit(sac, config, steps=192)
    assert infos[-1].diagnostics["alpha"] > 1.0
    config = sac.Config(**SMALL, autotune_alpha=False, initial_alpha=0.3)
    algo, infos, _ = _train_on_bandit(sac, config, steps=192)
    assert infos[-1].diagnostics["alpha"] == pytest.approx(0.3) and np.isnan(
        infos[-1].diagnostics["alpha_loss"]
    )


def test_td3_delays_policy_updates():
    algo, _, _ = _train_on_bandit(td3, td3.Config(**SMALL, policy_delay_updates=3), steps=160)
    changed = []
    for _ in range(6):
        before = [p.detach().clone() for p in algo.actor.parameters()]
        algo.update(algo.replay.sample(64, torch.device("cpu")))
        changed.append(not all(torch.equal(a, b) for a, b in zip(before, algo.actor.parameters())))
    # The actor (and the targets) move only on updates whose count is a multiple of the delay.
    first = algo.updates - 5
    assert changed == [(first + i) % 3 == 0 for i in range(6)] and sum(changed) == 2


def test_agents_explore_uniformly_then_with_the_policy():
    torch.manual_seed(0)
    det = td3.build_agent(td3.Config(random_steps=100, learning_starts_steps=100), OBS, ACT)
    assert isinstance(det, DeterministicAgent)
    obs = torch.zeros(2000, 2)
    det.set_mode("sample", 0)
    uniform, _, _ = det.step(obs, None, None, None)
    assert uniform.std(0).min() > 0.5  # U(-1, 1) has std 0.58
    det.set_mode("sample", 100)
    noisy, _, _ = det.step(obs, None, None, None)
    det.set_mode("eval", 100)
    greedy, _, _ = det.step(obs, None, None, None)
    assert torch.allclose(noisy.std(0), torch.full((2,), 0.1), atol=0.02)
    assert torch.equal(greedy, greedy[:1].expand_as(greedy))
    stochastic = sac.build_agent(sac.Config(random_steps=0, learning_starts_steps=256), OBS, ACT)
    assert isinstance(stochastic, SquashedGaussianAgent)
    stochastic.set_mode("sample", 0)
    a, _, _ = stochastic.step(obs, None, None, None)
    assert (a.abs() <= 1).all() and a.std(0).min() > 0.1


def test_configs_validate_and_published_settings_load():
    with pytest.raises(ValueError, match="td3.Config.tau"):
        td3.Config(tau=0.0)
    with pytest.raises(ValueError, match="sac.Config.learning_starts_steps"):
        sac.Config(learning_starts_steps=10)
    # Fujimoto et al. 2018, Sec. 6.1: 10,000 uniform-random steps before learning on HalfCheetah and
    # Ant, 1,000 on the other tasks (DDPG as re-tuned there too; SAC borrows the rule).
    starts = {
        "ddpg": (ddpg, 10_000),
        "ddpg_1k_start": (ddpg, 1_000),
        "td3": (td3, 10_000),
        "td3_1k_start": (td3, 1_000),
        "sac": (sac, 10_000),
        "sac_1k_start": (sac, 1_000),
    }
    for name, (module, steps) in starts.items():
        config = setting_configs(name)["algo"]
        assert isinstance(config, module.Config), name
        assert config.random_steps == config.learning_starts_steps == steps, name
    assert td3.Config().policy_delay_updates == 2 and sac.Config().batch_size == 256


# --- batched critics against the separate-network reference -------------------------------------


def _member_as_qnetwork(ensemble: QEnsemble, k: int, hidden_sizes: tuple[int, ...]) -> StateActionQNetwork:
    """Member ``k`` of ``ensemble`` copied into a separate ``StateActionQNetwork`` (nn.Linear stores
    [out, in])."""
    net = StateActionQNetwork(OBS.shape[0], ACT.shape[0], hidden_sizes)
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for linear, layer in zip(linears, ensemble.layers, strict=True):
            linear.weight.copy_(layer.weight[k].T)
            linear.bias.copy_(layer.bias[k, 0])
    return net


def test_q_ensemble_equals_separate_critics_on_the_same_weights():
    torch.manual_seed(0)
    ensemble = QEnsemble(2, 2, (16, 8), n_members=2)
    nets = [_member_as_qnetwork(ensemble, k, (16, 8)) for k in range(2)]
    obs, action = torch.randn(2, 5, 2), torch.rand(2, 5, 2) * 2 - 1  # leading dims [2, 5]
    q = ensemble(obs, action)
    assert q.shape == (2, 2, 5)
    for k, net in enumerate(nets):
        torch.testing.assert_close(q[k], net(obs, action))
    torch.testing.assert_close(ensemble(obs, action, n_members=1)[0], q[0])
    # Gradients of a loss on both members: each member's slice equals its own network's gradient.
    (q**2).mean(dim=(1, 2)).sum().backward()
    for k, net in enumerate(nets):
        (net(obs, action) ** 2).mean().backward()
        linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
        for linear, layer in zip(linears, ensemble.layers):
            torch.testing.assert_close(layer.weight.grad[k], linear.weight.grad.T)
            torch.testing.assert_close(layer.bias.grad[k, 0], linear.bias.grad)


def test_fused_adam_matches_the_per_tensor_loop():
    torch.manual_seed(0)
    params = [torch.randn(16, 8), torch.randn(8)]
    fused = [p.clone().requires_grad_() for p in params]
    loop = [p.clone().requires_grad_() for p in params]
    opt_fused, opt_loop = adam(fused, 1e-2), torch.optim.Adam(loop, lr=1e-2, foreach=False)
    for _ in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, q, g in zip(fused, loop, grads):
            p.grad, q.grad = g.clone(), g.clone()
        opt_fused.step()
        opt_loop.step()
    for p, q in zip(fused, loop):
        torch.testing.assert_close(p, q)


class _ReferenceLearner:
    """The QPG updates as written before the critics were batched: one ``StateActionQNetwork`` and one target
    per critic, the plain per-tensor Adam loop per network and per temperature, frozen critics by
    ``requires_grad_``. Built from a learner's current weights."""

    def __init__(self, algo, hidden_sizes):
        n = algo.critic.q.n_members
        self.q = [_member_as_qnetwork(algo.critic.q, k, hidden_sizes) for k in range(n)]
        self.q_target = [_member_as_qnetwork(algo.critic.target, k, hidden_sizes) for k in range(n)]
        self.actor = copy.deepcopy(algo.actor)
        self.actor_target = copy.deepcopy(algo.actor_target)
        c = algo.config
        self.critic_opt = torch.optim.Adam(
            [p for q in self.q for p in q.parameters()], lr=c.critic_learning_rate, foreach=False
        )
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=c.actor_learning_rate, foreach=False)
        if isinstance(c, sac.Config):
            self.log_alpha = algo.temperature.log_alpha.detach().clone().requires_grad_()
            self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=c.alpha_learning_rate, foreach=False)

    def step(self, opt, loss):
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.detach()

    def polyak(self, tau):
        for target, online in zip([*self.q_target, self.actor_target], [*self.q, self.actor]):
            if target is not None:
                polyak_update_(target, online, tau)

    def sac_update(self, b, c, target_entropy):
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = self.actor(b.next_observation)
            nq = [q(b.next_observation, next_action) for q in self.q_target]
            y = soft_q_target(b.return_n, b.discount_n, nq[0], nq[1], next_log_prob, alpha)
        q1, q2 = (q(b.observation, b.action) for q in self.q)
        critic_loss = self.step(self.critic_opt, 0.5 * (F.mse_loss(q1, y) + F.mse_loss(q2, y)))
        action, log_prob = self.actor(b.observation)
        for q in self.q:
            q.requires_grad_(False)
        q1_pi, q2_pi = (q(b.observation, action) for q in self.q)
        actor_loss = self.step(self.actor_opt, (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean())
        for q in self.q:
            q.requires_grad_(True)
        alpha_loss = self.step(self.alpha_opt, sac_temperature_loss(self.log_alpha, log_prob, target_entropy))
        self.polyak(c.tau)
        return {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha_loss": alpha_loss}

    def td3_update(self, b, c, half_width, update_index):
        with torch.no_grad():
            target_action = self.actor_target(b.next_observation)
            noise = torch.randn_like(target_action) * c.target_noise_std * half_width
            next_action = smoothed_target_action(
                target_action, noise, c.target_noise_clip * half_width, -torch.ones(2), torch.ones(2)
            )
            nq = [q(b.next_observation, next_action) for q in self.q_target]
            y = clipped_double_q_target(b.return_n, b.discount_n, nq[0], nq[1])
        q1, q2 = (q(b.observation, b.action) for q in self.q)
        losses = {"critic_loss": self.step(self.critic_opt, F.mse_loss(q1, y) + F.mse_loss(q2, y))}
        if update_index % c.policy_delay_updates == 0:
            self.q[0].requires_grad_(False)
            actor_loss = -self.q[0](b.observation, self.actor(b.observation)).mean()
            losses["actor_loss"] = self.step(self.actor_opt, actor_loss)
            self.q[0].requires_grad_(True)
            self.polyak(c.tau)
        return losses

    def ddpg_update(self, b, c):
        with torch.no_grad():
            y = q_target(
                b.return_n,
                b.discount_n,
                self.q_target[0](b.next_observation, self.actor_target(b.next_observation)),
            )
        critic_loss = self.step(self.critic_opt, F.mse_loss(self.q[0](b.observation, b.action), y))
        self.q[0].requires_grad_(False)
        actor_loss = self.step(self.actor_opt, -self.q[0](b.observation, self.actor(b.observation)).mean())
        self.q[0].requires_grad_(True)
        self.polyak(c.tau)
        return {"critic_loss": critic_loss, "actor_loss": actor_loss}


@pytest.mark.parametrize("module", [sac, td3, ddpg], ids=["sac", "td3", "ddpg"])
def test_batched_update_equals_the_separate_network_reference(module):
    hidden = (16, 16)
    config = module.Config(hidden_sizes=hidden, random_steps=64, learning_starts_steps=64, batch_size=32)
    algo, infos, _ = _train_on_bandit(module, config, steps=64)  # replay filled, no update yet
    assert sum(i.updates for i in infos) == 0
    ref = _ReferenceLearner(algo, hidden)  # fresh optimizers on both sides
    for _ in range(4):
        batch = algo.replay.sample(32, torch.device("cpu"))
        rng = torch.get_rng_state()
        info = algo.update(batch)
        torch.set_rng_state(rng)  # the same policy samples and target noise for the reference
        if module is sac:
            losses = ref.sac_update(batch, config, algo.mode.target_entropy)
        elif module is td3:
            losses = ref.td3_update(batch, config, (algo.mode.high - algo.mode.low) / 2, algo.updates)
        else:
            losses = ref.ddpg_update(batch, config)
        # Losses too: Adam's step barely depends on a loss's scale, the reported loss does.
        assert losses.keys() <= info.keys()
        for key, value in losses.items():
            torch.testing.assert_close(info[key], value, rtol=1e-5, atol=1e-6)
    tol = {"rtol": 1e-5, "atol": 1e-6}
    for k in range(len(ref.q)):
        for net, ensemble in ((ref.q[k], algo.critic.q), (ref.q_target[k], algo.critic.target)):
            torch.testing.assert_close(
                net.state_dict(), _member_as_qnetwork(ensemble, k, hidden).state_dict(), **tol
            )
    torch.testing.assert_close(ref.actor.state_dict(), algo.actor.state_dict(), **tol)
    if module is sac:
        torch.testing.assert_close(ref.log_alpha, algo.temperature.log_alpha.detach(), **tol)
    else:
        torch.testing.assert_close(ref.actor_target.state_dict(), algo.actor_target.state_dict(), **tol)


def test_a_frozen_view_of_the_critics_follows_their_steps_and_trains_nothing():
    """The single run's actor loss reads the critics through ``QEnsemble.frozen_view``: the same
    Q-values after every optimizer step of the critics, gradients to the action alone."""
    torch.manual_seed(0)
    critics = QEnsemble(2, 2, (8,), 2)
    view = critics.frozen_view()
    optimizer = adam(critics.parameters(), 1e-2)
    obs, action = torch.randn(5, 2), torch.randn(5, 2, requires_grad=True)
    for _ in range(3):
        optimizer.zero_grad()
        critics(obs, action.detach()).pow(2).mean().backward()
        optimizer.step()
        assert torch.equal(view(obs, action), critics(obs, action))
    view(obs, action).sum().backward()
    assert action.grad is not None and all(not p.requires_grad and p.grad is None for p in view.parameters())
