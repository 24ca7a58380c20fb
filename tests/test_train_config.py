"""Typed configs of the training entry and the algorithm registry (Contract 6)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_glossary import shipped_algorithms

from algorithms import registry
from algorithms.algos import a2c, dqn, ppo
from algorithms.configs import ConfigError, build, migrate_renamed
from algorithms.envs.config import EnvConfig
from algorithms.run_config import RUNNER_KINDS, SAMPLER_MODES, RunnerConfig, SamplerConfig, TrainConfig
from algorithms.samplers.modes import SAMPLERS
from algorithms.train import RUNNERS


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "threads"}, "mode"),
        ({"batch_T": 0}, "batch_T"),
        ({"batch_B": 0}, "batch_B"),
        ({"batch_B": 2, "n_workers": 3}, "n_workers"),
        ({"eval_n_envs": 0}, "eval_n_envs"),
        ({"eval_episodes": -1}, "eval_episodes"),
        ({"eval_max_steps": 0}, "eval_max_steps"),
        ({"batch_T": 2.5}, "batch_T"),
        ({"batch_B": True}, "batch_B"),
        ({"mode": "gpu", "env_workers": "fibers"}, "env_workers"),
        ({"mode": "cpu", "env_workers": "threads"}, "env_workers"),  # cpu workers run the policy
        ({"mode": "serial", "env_workers": "threads"}, "env_workers"),
    ],
)
def test_sampler_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=rf"SamplerConfig\.{field} "):
        SamplerConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "threads"}, "kind"),
        ({"n_steps": 0}, "n_steps"),
        ({"log_interval_steps": 0}, "log_interval_steps"),
        ({"eval_interval_steps": -5}, "eval_interval_steps"),
        ({"checkpoint_interval_steps": -1}, "checkpoint_interval_steps"),
        ({"seed": -1}, "seed"),
        ({"torch_threads": 0}, "torch_threads"),
        ({"device": "gpu"}, "device"),
        ({"device": "cuda:x"}, "device"),
        ({"n_gpus": 0}, "n_gpus"),
        ({"async_param_sync_steps": 0}, "async_param_sync_steps"),
        ({"replay_ratio_target": -0.1}, "replay_ratio_target"),
        ({"replay_ratio_counting": "both"}, "replay_ratio_counting"),
        ({"tensorboard": 1}, "tensorboard"),
        ({"checkpoint_replay": "yes"}, "checkpoint_replay"),
        ({"n_steps": "100"}, "n_steps"),
    ],
)
def test_runner_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises((ValueError, TypeError), match=rf"RunnerConfig\.{field} "):
        RunnerConfig(**kwargs)


def test_runner_config_accepts_devices_and_derives_checkpoint_interval():
    assert RunnerConfig(device="cuda:1").device == "cuda:1"
    assert RunnerConfig(log_interval_steps=500).checkpoint_every_steps == 500
    assert RunnerConfig(log_interval_steps=500, checkpoint_interval_steps=2000).checkpoint_every_steps == 2000
    assert SamplerConfig(batch_T=5, batch_B=4).batch_size == 20


def test_sampler_and_runner_configs_round_trip_through_json():
    for config in (
        SamplerConfig(mode="cpu", batch_T=20, batch_B=8, n_workers=4),
        RunnerConfig(replay_ratio_target=1),
    ):
        data = json.loads(json.dumps(dataclasses.asdict(config)))
        assert build(type(config), data, "x") == config
    # An int in a float field is read as a float (hand-written JSON often says 1).
    restored = build(RunnerConfig, {"replay_ratio_target": 1}, "runner")
    assert isinstance(restored.replay_ratio_target, float)


def test_build_names_unknown_and_renamed_keys():
    with pytest.raises(
        ConfigError, match=r"runner: unknown key 'n_step' for algorithms.run_config.RunnerConfig"
    ):
        build(RunnerConfig, {"n_step": 10}, "runner")
    with pytest.raises(
        ConfigError, match=r"^x.toml \[algo\]: key 'min_steps_learn' was renamed to 'learning_starts_steps'$"
    ):
        build(dqn.Config, {"min_steps_learn": 10}, "x.toml [algo]")


def test_config_json_from_before_the_renames_still_loads():
    old = {"max_grad_norm": 0.25, "rmsprop_epsilon": 1e-4}
    assert migrate_renamed(a2c.Config, old) == {"clip_grad_norm": 0.25, "optimizer_eps": 1e-4}
    config = build(a2c.Config, migrate_renamed(a2c.Config, old), "config.json [algo_config]")
    assert (config.clip_grad_norm, config.optimizer_eps) == (0.25, 1e-4)
    # A renamed key the class does not have stays an unknown key.
    assert migrate_renamed(a2c.Config, {"min_steps_learn": 5}) == {"min_steps_learn": 5}


def test_registry_lists_every_algorithm_and_rejects_unknown_names():
    # Found by their files (tests/test_add_algorithm.py checks the rule); each Config builds with its
    # defaults. The guard keeps an empty registry from passing.
    assert {"dqn", "r2d1", "ppo", "sac"} <= set(shipped_algorithms())
    for name in shipped_algorithms():
        assert registry.config_class(name)().__module__ == f"{registry.PACKAGE}.{name}"
    known = ", ".join(sorted(registry.ALGORITHMS))
    with pytest.raises(ValueError, match=rf"unknown algorithm 'dqn2'; known: {known}$"):
        registry.algo_module("dqn2")


def test_every_runner_kind_and_sampler_mode_has_an_implementation():
    assert set(RUNNERS) == set(RUNNER_KINDS)
    assert set(SAMPLERS) == set(SAMPLER_MODES)


def test_ddp_rejects_ppo_target_kl_stop():
    env = EnvConfig(id="CartPole-v1", kind="gym")
    TrainConfig("ppo", ppo.Config(target_kl=0.0), env, SamplerConfig(), RunnerConfig(kind="ddp"))
    with pytest.raises(ValueError, match="target_kl=0.01 is not supported with runner.kind 'ddp'"):
        TrainConfig("ppo", ppo.Config(target_kl=0.01), env, SamplerConfig(), RunnerConfig(kind="ddp"))


def test_thread_env_workers_need_envs_that_step_on_their_own_threads():
    sampler = SamplerConfig(mode="alternating", batch_B=2, env_workers="threads")
    TrainConfig("dqn", registry.config_class("dqn")(), EnvConfig(id="pong"), sampler, RunnerConfig())
    for env in (EnvConfig(id="pong", backend="gymnasium"), EnvConfig(id="CartPole-v1", kind="gym")):
        with pytest.raises(ValueError, match="'threads' needs envs that step on their own threads"):
            TrainConfig("dqn", registry.config_class("dqn")(), env, sampler, RunnerConfig())


def test_agent_factory_pickles_frame_spaces_small_and_equal():
    import pickle

    import gymnasium as gym
    import numpy as np

    from algorithms.envs.base import compact_space, expand_space

    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    factory = registry.AgentFactory("dqn", registry.config_class("dqn")(), frames, gym.spaces.Discrete(6))
    data = pickle.dumps(factory)
    assert len(data) < 4096  # the bounds in full: about 114 kB
    assert pickle.loads(data) == factory
    # Only uniform boxes are shortened; anything else travels as it is.
    uneven = gym.spaces.Box(np.array([-1, 0], np.float32), np.array([1, 2], np.float32))
    assert compact_space(uneven) is uneven
    assert expand_space(compact_space(gym.spaces.Box(-np.inf, np.inf, (17,)))) == gym.spaces.Box(
        -np.inf, np.inf, (17,)
    )
