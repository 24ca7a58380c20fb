"""R2D1: sampler-side TD errors and initial priorities by hand, each rlpyt switch changing only what
it should, replay-ratio accounting both ways, and a memory probe only a recurrent learner solves."""

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from dqn_probes import single_loss
from r2d1_probes import ACT, OBS, Driver

from algorithms.algos import r2d1, r2d1_targets
from algorithms.arrays import BatchSpec, NamedArrays
from algorithms.functional.priorities import sequence_priority
from algorithms.functional.value_rescaling import signed_hyperbolic, signed_parabolic

torch.set_num_threads(1)

SMALL = r2d1.Config(
    discount=0.9,
    n_step=2,
    sequence_length_steps=6,
    burn_in_steps=2,
    sequence_period_steps=3,
    batch_size_sequences=8,
    replay_size_steps=1024,
    learning_starts_steps=64,
    replay_ratio=2.0,
    target_update_period_updates=50,
    learning_rate=1e-2,
    lstm_size=16,
    fc_size=16,
    head_hidden_size=16,
    mlp_hidden_sizes=(16,),
    eps_per_env="same",
    eps_start=0.3,
    eps_final=0.3,
    eps_decay_steps=0,
    eps_eval=0.0,
)


def make(config: r2d1.Config, seed: int = 0, B: int = 4):
    torch.manual_seed(seed)
    agent = r2d1.build_agent(config, OBS, ACT)
    return agent, r2d1.Algo(config, agent, 1, BatchSpec(8, B))


def bootstrap_q(agent, batch: NamedArrays) -> torch.Tensor:
    b = batch.bootstrap
    return agent.q_values(b.observation, b.prev_action, b.prev_reward, b.agent_state)[0]


def test_sampler_td_errors_by_hand():
    config = dataclasses.replace(SMALL, n_step=2, discount=0.5)
    q = torch.tensor([[[1.0, 2.0]], [[0.0, 3.0]], [[4.0, 0.5]]])  # [T=3, B=1, A=2]
    samples = NamedArrays(
        agent_info=NamedArrays(q=q),
        action=torch.tensor([[0], [1], [0]]),
        reward=torch.tensor([[1.0], [2.0], [0.5]]),
        terminated=torch.tensor([[False], [True], [False]]),
        truncated=torch.zeros(3, 1, dtype=torch.bool),
    )
    q_T = torch.tensor([[5.0, 6.0]])
    h, h_inv = signed_hyperbolic, signed_parabolic
    # t=0: 2-step window ends at the terminal at t=1: G = 1 + 0.5 * 2 = 2, no bootstrap; Q(s0, 0) = 1.
    # t=1: terminal: y = h(2); Q(s1, 1) = 3.  t=2: cut at the batch end: y = h(0.5 + 0.5 h^-1(6)); Q = 4.
    expected = torch.stack(
        [h(torch.tensor(2.0)) - 1, h(torch.tensor(2.0)) - 3, h(0.5 + 0.5 * h_inv(torch.tensor(6.0))) - 4]
    )
    td = r2d1_targets.sampler_td_errors(config, samples, q_T)
    assert torch.allclose(td[:, 0], expected.abs(), atol=1e-6)
    # 1-step (rlpyt 2019): t=0 bootstraps from max Q(s1) = 3: y = h(1 + 0.5 h^-1(3)).
    td1 = r2d1_targets.sampler_td_errors(
        dataclasses.replace(config, initial_priority_one_step=True), samples, q_T
    )
    assert torch.allclose(td1[0, 0], (h(1 + 0.5 * h_inv(torch.tensor(3.0))) - 1).abs(), atol=1e-6)
    assert torch.allclose(td1[1:], td[1:])
    # The n-step done bug: t=0 bootstraps with gamma^2 from s2, across the episode end.
    tdb = r2d1_targets.sampler_td_errors(dataclasses.replace(config, nstep_done_bug=True), samples, q_T)
    assert torch.allclose(tdb[0, 0], (h(2 + 0.25 * h_inv(torch.tensor(4.0))) - 1).abs(), atol=1e-6)


def test_initial_priority_half_segments_by_hand():
    td = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    whole = r2d1_targets.initial_sequence_priorities(SMALL, td)
    first = r2d1_targets.initial_sequence_priorities(
        dataclasses.replace(SMALL, initial_priority_half_segment=1), td
    )
    second = r2d1_targets.initial_sequence_priorities(
        dataclasses.replace(SMALL, initial_priority_half_segment=2), td
    )
    assert torch.allclose(whole, torch.tensor([0.9 * 4 + 0.1 * 2.5]))
    assert torch.allclose(first, torch.tensor([0.9 * 2 + 0.1 * 1.5]))
    assert torch.allclose(second, torch.tensor([0.9 * 4 + 0.1 * 3.5]))


def test_new_sequences_get_whole_sequence_sampler_priorities():
    agent, algo = make(SMALL)
    driver = Driver(agent, 4, length=3)
    batches = [driver.sample(8) for _ in range(4)]
    td = torch.cat(
        [r2d1_targets.sampler_td_errors(SMALL, b, bootstrap_q(agent, b)) for b in batches]
    )  # [32, 4]
    for b in batches:
        algo.append_samples(b)
    storage, selector = algo.replay.storage, algo.replay.selector
    items = np.flatnonzero(storage.valid(np.arange(storage.num_items)))
    # Complete sequences start every 3 steps with 2 + 6 + 2 = 10 steps each: starts 0, 3, ..., 21.
    assert len(items) == 8 * 4
    c = SMALL
    for item in items:
        start, env = (item // 4) * c.sequence_period_steps, item % 4
        trained = td[start + c.burn_in_steps : start + c.burn_in_steps + c.sequence_length_steps, env]
        expected = sequence_priority(trained[:, None], c.priority_eta) ** c.priority_alpha
        assert selector.tree.get(np.array([item]))[0] == pytest.approx(float(expected), rel=1e-5)


def quantities(config: r2d1.Config) -> dict[str, np.ndarray]:
    """Everything the rlpyt switches could touch, from the same seed and the same data."""
    agent, algo = make(config)
    driver = Driver(agent, 4, length=3)
    batches = [driver.sample(8) for _ in range(4)]
    out = {
        "td_sampler": r2d1_targets.sampler_td_errors(
            config, batches[0], bootstrap_q(agent, batches[0])
        ).numpy()
    }
    for b in batches:
        algo.append_samples(b)
    storage, selector = algo.replay.storage, algo.replay.selector
    items = np.flatnonzero(storage.valid(np.arange(storage.num_items)))
    out["alpha_beta"] = np.array([selector.alpha, selector.beta])
    out["tree_priorities"] = selector.tree.get(items)
    fixed = storage.extract(items[:8]).replace(is_weights=torch.ones(8))
    loss, priorities, _ = single_loss(algo, fixed)
    out["loss"], out["priorities"] = np.array([float(loss.detach())]), priorities.detach().numpy()
    _, learner = make(config, seed=1)
    infos = [learner.optimize(i, b) for i, b in enumerate(batches)]
    out["updates"] = np.array([i.updates for i in infos])
    out["samples_trained"] = np.array([i.samples_trained for i in infos])
    out["samples_replayed"] = np.array([i.samples_replayed for i in infos])
    return out


SWITCHES = {
    "swap_priority_exponents": (True, {"alpha_beta", "tree_priorities"}),
    "initial_priority_one_step": (True, {"td_sampler", "tree_priorities"}),
    "initial_priority_no_alpha": (True, {"tree_priorities"}),
    "initial_priority_half_segment": (2, {"tree_priorities"}),
    "replay_ratio_counts_burnin": (True, {"updates", "samples_trained", "samples_replayed"}),
    "nstep_done_bug": (True, {"td_sampler", "tree_priorities", "loss", "priorities"}),
}


@pytest.fixture(scope="module")
def baseline():
    return quantities(SMALL)


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_rlpyt_switch_changes_only_what_it_should(switch, baseline):
    value, touched = SWITCHES[switch]
    changed = quantities(dataclasses.replace(SMALL, **{switch: value}))
    differing = {
        k
        for k in baseline
        if baseline[k].shape != changed[k].shape or not np.allclose(baseline[k], changed[k])
    }
    assert differing == touched


def test_switch_values_by_hand(baseline):
    swapped = quantities(dataclasses.replace(SMALL, swap_priority_exponents=True))
    assert np.allclose(swapped["alpha_beta"], [0.6, 0.9]) and np.allclose(baseline["alpha_beta"], [0.9, 0.6])
    # Same raw priorities p, entered as p^0.6 instead of p^0.9; without alpha, as p itself.
    p = baseline["tree_priorities"] ** (1 / 0.9)
    assert np.allclose(swapped["tree_priorities"], p**0.6)
    raw = quantities(dataclasses.replace(SMALL, initial_priority_no_alpha=True))
    assert np.allclose(raw["tree_priorities"], p)
    # Counting burn-in: 8 sequences x (6 + 2) steps per update instead of 8 x 6, at replay ratio 2.
    burnin = quantities(dataclasses.replace(SMALL, replay_ratio_counts_burnin=True))
    steps_learning = 32 * 3  # the first batch only fills the replay (learning_starts_steps = 64)
    assert baseline["updates"].sum() == int(2 * steps_learning // (8 * 6))
    assert burnin["updates"].sum() == int(2 * steps_learning // (8 * 8))
    for q in (baseline, burnin):  # both countings are reported either way
        assert np.array_equal(q["samples_trained"], q["updates"] * 8 * 6)
        assert np.array_equal(q["samples_replayed"], q["updates"] * 8 * 8)


@pytest.mark.slow
def test_r2d1_solves_memory_probe():
    """The cue is visible only at the first of 3 steps; a learner without memory scores 0.5."""
    config = dataclasses.replace(
        SMALL, n_step=1, replay_ratio=8.0, batch_size_sequences=16, replay_size_steps=2048
    )
    agent, algo = make(config, B=8)
    driver = Driver(agent, 8, length=3)
    for itr in range(60):
        agent.set_mode("sample")
        algo.optimize(itr, driver.sample(8))
    agent.set_mode("eval")
    final_rewards = Driver(agent, 64, length=3, seed=1).sample(3).reward[2]
    assert float(final_rewards.mean()) >= 0.95


@pytest.mark.parametrize(
    "field,value",
    [
        ("initial_priority_half_segment", 3),
        ("discount", -0.1),
        ("value_rescaling", "log"),
        ("priority_eta", 2.0),
    ],
)
def test_r2d1_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        r2d1.Config(**{field: value})


def test_r2d2_defaults_run_r2d2_without_rlpyt_deviations():
    # The values are r2d2_paper.toml's (tests/test_config_defaults.py); this checks what they mean:
    # the exponents as R2D2 states them and the replay ratio counted over trained steps only.
    c = r2d1.Config()
    assert c.alpha_beta == (c.priority_alpha, c.priority_beta)
    assert c.replayed_steps_per_sequence == c.sequence_length_steps


def test_effective_values_name_the_swap():
    assert r2d1.Config().effective_values() == {}
    swapped = r2d1.Config(priority_alpha=0.9, priority_beta=0.6, swap_priority_exponents=True)
    effective = swapped.effective_values()
    assert {k: v for k, (v, _) in effective.items()} == {"priority_alpha": 0.6, "priority_beta": 0.9}
    assert all(why.startswith("swap_priority_exponents = true") for _, why in effective.values())
    # What is declared is what the replay runs with.
    assert (effective["priority_alpha"][0], effective["priority_beta"][0]) == swapped.alpha_beta


def _truncating_batches(frames: bool, n: int, T: int = 8, B: int = 2, seed: int = 0) -> list[NamedArrays]:
    """Random Contract 3 batches whose episodes end by a time limit every 5 steps."""
    g = torch.Generator().manual_seed(seed)
    shape = (4, 84, 84) if frames else (2,)
    batches, step = [], 0
    for _ in range(n):
        if frames:
            obs = torch.randint(0, 255, (T, B, *shape), generator=g, dtype=torch.uint8)
        else:
            obs = torch.rand((T, B, *shape), generator=g)
        truncated = torch.tensor([(step + t) % 5 == 4 for t in range(T)])[:, None].expand(T, B).clone()
        step += T
        batches.append(
            NamedArrays(
                observation=obs,
                action=torch.randint(0, 2, (T, B), generator=g),
                reward=torch.rand((T, B), generator=g),
                terminated=torch.zeros(T, B, dtype=torch.bool),
                truncated=truncated,
                final_observation=obs.flip(0),
                prev_action=torch.zeros(T, B, dtype=torch.long),
                prev_reward=torch.zeros(T, B),
                agent_info=NamedArrays(
                    q=torch.rand((T, B, 2), generator=g),
                    prev_state=NamedArrays(h=torch.zeros(T, B, 16), c=torch.zeros(T, B, 16)),
                ),
                bootstrap=NamedArrays(
                    observation=obs[0],
                    prev_action=torch.zeros(B, dtype=torch.long),
                    prev_reward=torch.zeros(B),
                    agent_state=NamedArrays(h=torch.zeros(B, 16), c=torch.zeros(B, 16)),
                ),
            )
        )
    return batches


@pytest.mark.parametrize("frames", [False, True])
def test_time_limits_bootstrap_from_final_observations(frames):
    """Full observations: time-limit windows bootstrap from the stored final observation (changing it
    changes the loss). Frames (no final frame kept): training still runs, time-limit steps masked."""
    import gymnasium as gym

    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8) if frames else OBS
    config = dataclasses.replace(SMALL, learning_starts_steps=16, batch_size_sequences=2)
    torch.manual_seed(0)
    agent = r2d1.build_agent(config, space, ACT)
    algo = r2d1.Algo(config, agent, 1, BatchSpec(8, 2))
    for batch in _truncating_batches(frames, 4):
        algo.append_samples(batch)
    storage = algo.replay.storage
    items = np.flatnonzero(storage.valid(np.arange(storage.num_items)))[:2]
    batch = storage.extract(items).replace(is_weights=torch.ones(2))
    loss, priorities, _ = single_loss(algo, batch)
    assert torch.isfinite(loss) and priorities.shape == (2,)
    if not frames:
        moved = batch.replace(final_observation=batch.final_observation + 1.0)
        assert not torch.allclose(single_loss(algo, moved)[0], loss)
    assert algo.learn(2).updates == 2


def test_a_batch_bootstrap_values_are_the_next_batch_first_acting_values():
    # R2D1's append_samples takes a batch's bootstrap Q-values from the next batch's first step.
    agent, _ = make(SMALL)
    driver = Driver(agent, 4, length=3)
    first, second = driver.sample(8), driver.sample(8)
    torch.testing.assert_close(bootstrap_q(agent, first), second.agent_info.q[0], rtol=0, atol=0)


def test_unrolls_cut_or_whole_give_one_pass_values_and_trained_steps_gradients():
    # The target network runs the whole sequence as one pass; the online network cuts it into the
    # burn-in and the bootstrap steps without gradient and the trained steps with it. Both must give
    # the values and per-step states of one pass, and the online cut the gradient of one pass with
    # the burn-in detached, with episode starts inside the burn-in, at its end and in the rest.
    import gymnasium as gym

    space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    config, algo, batch = _time_limit_learner(space)
    burn, trained = config.burn_in_steps, config.sequence_length_steps
    g = torch.Generator().manual_seed(1)
    episode_start = torch.rand(batch.episode_start.shape, generator=g) < 0.3
    episode_start[burn - 1 : burn + 1] = True
    episode_start[burn + trained, 0] = True  # at the online cut in one sequence, not the other
    episode_start[burn + trained, 1] = False
    batch = batch.replace(
        episode_start=episode_start,
        init_state=batch.init_state.map(lambda s: torch.randn(s.shape, generator=g)),
    )
    model = algo.model
    params = list(model.parameters())

    def one_pass():  # the reference: the burn-in detached, the rest in one pass with gradient
        with torch.no_grad():
            _, state = model(batch.observation[:burn], batch.prev_action[:burn], batch.prev_reward[:burn],
                             batch.init_state, reset=batch.episode_start[:burn])  # fmt: skip
        rest = slice(burn, None)
        return model(batch.observation[rest], batch.prev_action[rest], batch.prev_reward[rest], state,
                     reset=batch.episode_start[rest], return_states=True)  # fmt: skip

    q_ref, _, states_ref = one_pass()
    grads_ref = torch.autograd.grad(q_ref[:trained].square().sum(), params)
    for need_states, stepwise in itertools.product((False, True), (False, True)):
        q_cut, states_cut = r2d1.unroll(algo.config, model, batch, need_states, stepwise)
        q_whole, states_whole = r2d1.unroll(algo.config, model, batch, need_states, stepwise, grad=False)
        assert q_cut.shape == q_whole.shape == q_ref.shape
        torch.testing.assert_close(q_cut.detach(), q_ref.detach(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(q_whole, q_ref.detach(), rtol=1e-6, atol=1e-6)
        grads = torch.autograd.grad(q_cut[:trained].square().sum(), params)
        for got, want in zip(grads, grads_ref, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        if need_states:
            for cut, whole, ref in zip(
                states_cut.values(), states_whole.values(), states_ref.values(), strict=True
            ):
                torch.testing.assert_close(cut.detach(), ref.detach(), rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(whole, ref.detach(), rtol=1e-6, atol=1e-6)


def _time_limit_learner(space):
    """(config, learner, two stored sequences) after four batches with time limits (full observations)."""
    config = dataclasses.replace(SMALL, learning_starts_steps=16, batch_size_sequences=2)
    torch.manual_seed(0)
    algo = r2d1.Algo(config, r2d1.build_agent(config, space, ACT), 1, BatchSpec(8, 2))
    for batch in _truncating_batches(False, 4):
        algo.append_samples(batch)
    storage = algo.replay.storage
    items = np.flatnonzero(storage.valid(np.arange(storage.num_items)))[:2]
    return config, algo, storage.extract(items)
