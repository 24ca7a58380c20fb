"""Serial sampler and evaluation sampler on CartPole: Contract 3's batch layout, resets at episode
boundaries (previous action/reward, recurrent state), same-seed determinism, episode-based eval."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import train_probe_algo as probe

from algorithms.arrays import NamedArrays
from algorithms.envs.config import EnvConfig
from algorithms.envs.factory import make_vec_env
from algorithms.run_config import SamplerConfig
from algorithms.samplers.base import env_spaces
from algorithms.samplers.evaluation import EvalSampler
from algorithms.samplers.seeding import env_seed
from algorithms.samplers.serial import SerialSampler
from algorithms.samplers.stepper import StepWriter, next_inputs

CARTPOLE = EnvConfig(id="CartPole-v1", kind="gym")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def make_sampler(seed=0, T=60, B=3, recurrent=False, env=CARTPOLE):
    torch.manual_seed(seed)
    agent = probe.build_agent(probe.Config(recurrent=recurrent), *env_spaces(env))
    sampler = SerialSampler(env, agent, SamplerConfig(batch_T=T, batch_B=B), seed)
    sampler.initialize()
    return sampler, agent


def clone(samples):
    return samples.map(lambda x: x.clone())


def test_batch_layout_follows_contract_3():
    sampler, _ = make_sampler(T=60, B=3)
    samples, traj_infos = sampler.sample(0)
    sampler.shutdown()
    assert samples.fields == (
        "observation",
        "action",
        "reward",
        "terminated",
        "truncated",
        "final_observation",
        "prev_action",
        "prev_reward",
        "agent_info",
        "env_info",
        "bootstrap",
    )
    assert all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in samples.leaves())
    assert samples.observation.shape == (60, 3, 4) and samples.action.shape == (60, 3)
    assert samples.agent_info.logits.shape == (60, 3, 2)
    assert samples.env_info.fields == ("life_loss", "raw_reward", "episode_return", "episode_length")
    assert samples.bootstrap.fields == ("observation", "prev_action", "prev_reward")
    assert samples.bootstrap.observation.shape == (3, 4)

    done = samples.terminated | samples.truncated
    assert done.any(), "a random CartPole policy ends episodes within 60 steps"
    # prev_action / prev_reward: zero at an episode's first step, the previous step's otherwise.
    for t in range(1, 60):
        started = done[t - 1]
        assert torch.equal(samples.prev_action[t][started], torch.zeros_like(samples.action[t][started]))
        assert torch.equal(samples.prev_reward[t][started], torch.zeros_like(samples.reward[t][started]))
        assert torch.equal(samples.prev_action[t][~started], samples.action[t - 1][~started])
        assert torch.equal(samples.prev_reward[t][~started], samples.reward[t - 1][~started])
        # Where the episode goes on, the next observation is the one the env returned; where it
        # ended, the final observation differs from the new episode's first one.
        assert torch.equal(samples.observation[t][~started], samples.final_observation[t - 1][~started])
        if started.any():
            assert not torch.equal(samples.observation[t][started], samples.final_observation[t - 1][started])
    assert torch.equal(samples.prev_action[0], torch.zeros(3, dtype=samples.action.dtype))
    # One trajectory info per ended episode, CartPole's return = its length (reward 1 per step).
    assert len(traj_infos) == int(done.sum())
    for info in traj_infos:
        assert info["return"] == info["length"] and 0 <= info["env_rank"] < 3


def test_batches_continue_across_sample_calls_and_bootstrap_is_the_next_input():
    sampler, _ = make_sampler(T=10, B=2)
    first = clone(sampler.sample(0)[0])
    second = sampler.sample(1)[0]
    sampler.shutdown()
    assert torch.equal(second.observation[0], first.bootstrap.observation)
    assert torch.equal(second.prev_action[0], first.bootstrap.prev_action)
    assert torch.equal(second.prev_reward[0], first.bootstrap.prev_reward)


def test_same_seed_gives_identical_samples_and_another_seed_does_not():
    runs = []
    for seed in (3, 3, 4):
        sampler, _ = make_sampler(seed=seed, T=25, B=2)
        batches = [clone(sampler.sample(itr)[0]) for itr in range(3)]
        sampler.shutdown()
        runs.append(batches)
    assert all(a == b for a, b in zip(runs[0], runs[1]))
    assert not all(a == b for a, b in zip(runs[0], runs[2]))


def test_first_batch_equals_a_plain_vector_env_driven_by_the_logged_actions():
    """The sampler adds nothing to the env: replaying its actions reproduces its observations."""
    sampler, _ = make_sampler(seed=5, T=40, B=2)
    samples = clone(sampler.sample(0)[0])
    sampler.shutdown()
    env = make_vec_env(CARTPOLE, 2, env_seed(5))
    obs = env.reset()
    for t in range(40):
        assert np.array_equal(obs, samples.observation[t].numpy())
        step = env.step(samples.action[t].numpy())
        assert np.array_equal(step.reward, samples.reward[t].numpy())
        assert np.array_equal(step.terminated, samples.terminated[t].numpy())
        assert np.array_equal(step.truncated, samples.truncated[t].numpy())
        assert np.array_equal(step.final_observation, samples.final_observation[t].numpy())
        obs = step.observation
    assert (samples.terminated | samples.truncated).any(), "episodes end inside the batch"
    env.close()


def test_recurrent_state_resets_where_an_episode_ended():
    sampler, agent = make_sampler(T=80, B=3, recurrent=True)
    assert agent.recurrent
    samples = sampler.sample(0)[0]
    sampler.shutdown()
    # The probe's state counts steps; the sampler zeroes it where an episode ended, so the count
    # before each step equals the steps taken since that episode started.
    done = (samples.terminated | samples.truncated).numpy()
    since_start = np.zeros(3)
    for t in range(80):
        assert np.array_equal(samples.agent_info.prev_state.count[t].numpy(), since_start)
        since_start = np.where(done[t], 0, since_start + 1)
    assert done.any()
    assert np.array_equal(samples.bootstrap.agent_state.count.numpy(), since_start)


def test_evaluation_returns_the_requested_episodes_in_eval_mode_and_restores_the_agent():
    torch.manual_seed(0)
    agent = probe.build_agent(probe.Config(), *env_spaces(CARTPOLE))
    agent.set_env_ranks([0, 1, 2, 3], 4)
    agent.set_mode("sample", 123)
    modes = []
    original_step = agent.step

    def recording_step(*args):
        modes.append(agent.mode)
        return original_step(*args)

    agent.step = recording_step
    evaluator = EvalSampler(CARTPOLE, agent, n_envs=2, seed=env_seed(0, "eval"), max_steps=500)
    modes.clear()  # building the evaluator sized its buffers with one step on zeros
    episodes = evaluator.evaluate(5, env_steps=1000)
    assert [e["episode"] for e in episodes] == [0, 1, 2, 3, 4]
    assert all(e["return"] == e["length"] and 1 <= e["length"] <= 500 for e in episodes)
    assert set(modes) == {"eval"}
    assert agent.mode == "sample" and agent.env_steps == 123
    assert agent.env_ranks.tolist() == [0, 1, 2, 3] and agent.global_batch == 4
    assert evaluator.evaluate(0, env_steps=1000) == []
    evaluator.close()


def test_evaluation_caps_episodes_at_max_steps():
    torch.manual_seed(0)
    agent = probe.build_agent(probe.Config(), *env_spaces(CARTPOLE))
    # Zero weights: the greedy action is always 0 (push left), which keeps the pole up for about 8
    # steps from CartPole's near-upright starts; a cap of 5 steps cuts every episode.
    with torch.no_grad():
        agent.model.weight.zero_()
        agent.model.bias.zero_()
    evaluator = EvalSampler(CARTPOLE, agent, n_envs=3, seed=1, max_steps=5)
    episodes = evaluator.evaluate(4, env_steps=0)
    evaluator.close()
    assert len(episodes) == 4
    assert all(e["length"] == 5 and e["return"] == 5.0 for e in episodes)


def test_env_seed_rule():
    assert env_seed(7) == 7
    assert env_seed(7, "eval") != env_seed(7)
    assert env_seed(7, "train", 1000) != env_seed(7, "train", 2000)
    with pytest.raises(ValueError, match="role"):
        env_seed(7, "test")


def test_step_writer_fills_time_steps_and_rejects_a_record_with_other_fields():
    sampler, _ = make_sampler(T=4, B=2)
    samples = clone(sampler.sample(0)[0])
    sampler.shutdown()
    steps = samples.replace(bootstrap=None)
    buffer = steps.map(torch.zeros_like)
    writer = StepWriter(buffer.replace(bootstrap=None))
    for t in range(4):
        writer.write(t, steps[t].replace(bootstrap=None))
    assert buffer == steps
    with pytest.raises(ValueError, match="do not match the sample buffer"):
        writer.write(0, steps[0].replace(bootstrap=None, extra=torch.zeros(2)))


@pytest.mark.parametrize(("columns", "other"), [(slice(0, 3), 3), (slice(1, 4), 0)])
def test_step_writer_fills_final_observations_once_per_batch(columns, other):
    """Ended rows keep their own final observation (at t = 0, in the middle and at T - 1, one of them
    in an env whose next step ends too); every other row equals the next step's observation."""
    T, B = 4, 3
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 255, size=(T + 1, B, 2, 2), dtype=np.uint8)  # obs[T]: after the batch
    finals = obs[1:].copy()
    ended = np.zeros((T, B), bool)
    ended[0, 0] = ended[1, 0] = ended[2, 2] = ended[3, 1] = True
    finals[ended] = 255 - obs[1:][ended]
    buffer = NamedArrays(
        observation=np.zeros((T, 4, 2, 2), np.uint8),
        terminated=np.zeros((T, 4), bool),
        truncated=np.zeros((T, 4), bool),
        final_observation=np.zeros((T, 4, 2, 2), np.uint8),
    )
    writer = StepWriter(buffer, columns)
    for t in range(T):
        record = NamedArrays(
            observation=torch.from_numpy(obs[t].copy()),
            terminated=ended[t] & (np.arange(B) != 2),
            truncated=ended[t] & (np.arange(B) == 2),
            final_observation=finals[t].copy(),
        )
        writer.write(t, record)
    assert np.array_equal(buffer.final_observation[:, columns], finals)
    assert np.array_equal(buffer.observation[:, columns], obs[:T])
    assert not buffer.final_observation[:, other].any()  # the other column is not this writer's
    # A second batch starts afresh: nothing ended in it, so no row of the first batch comes back.
    for t in range(T):
        record = NamedArrays(
            observation=obs[t],
            terminated=np.zeros(B, bool),
            truncated=np.zeros(B, bool),
            final_observation=obs[t + 1],
        )
        writer.write(t, record)
    assert np.array_equal(buffer.final_observation[:, columns], obs[1:])


def test_next_inputs_zero_where_an_episode_ended_and_copy_what_they_keep():
    """Continuous actions [B, A], both kinds of episode end; the record and the env's arrays stay intact."""
    action = torch.tensor([[1.0, -2.0], [3.0, 4.0], [-0.5, 0.25]])
    kept_action = action.clone()
    env_observation = np.arange(6, dtype=np.float32).reshape(3, 2)
    env_step = NamedArrays(
        observation=env_observation,
        reward=np.array([1.5, -1.0, 2.0], np.float32),
        terminated=np.array([False, True, False]),
        truncated=np.array([False, False, True]),
    )
    inputs = next_inputs(action, env_step).to_torch()
    assert torch.equal(inputs.prev_action, torch.tensor([[1.0, -2.0], [0.0, 0.0], [0.0, 0.0]]))
    assert torch.equal(inputs.prev_reward, torch.tensor([1.5, 0.0, 0.0]))
    assert torch.equal(inputs.observation, torch.from_numpy(env_observation))
    assert torch.equal(action, kept_action)  # zeroed in a copy, not in the agent's output
    assert env_step.reward[1] == -1.0
    env_observation[:] = -1  # the env reuses its output array on the next step
    assert inputs.observation[0, 1] == 1.0
