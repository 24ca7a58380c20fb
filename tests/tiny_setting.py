"""The smallest setting the end-to-end tests run through ``python -m repro``: A2C on CartPole-v1,
4 envs, no reward clipping or life loss, one short evaluation. A test writes it next to its plan and
sets the budget (``n_steps``, ``log_interval_steps``) here or from a profile (``a2c_long_profile``)."""

from __future__ import annotations


def a2c_cartpole_setting(n_steps: int = 400, log_interval_steps: int = 100, why: str = "test") -> str:
    """The setting's TOML text; ``why`` is the ``source`` of the budget (read in the run's config)."""
    return f"""
[setting]
title = "A2C on CartPole (test)"
citation = "test"
base = "a2c_atari"

[algo]
entropy_coef = {{ value = 0.0, source = "test" }}
anneal_env_steps = {{ value = 0, source = "test" }}
[env]
id = {{ value = "CartPole-v1", source = "test" }}
kind = {{ value = "gym", source = "test" }}
fire_reset = {{ value = false, source = "test" }}
clip_rewards = {{ value = false, source = "test" }}
episodic_life = {{ value = false, source = "test" }}
[sampler]
batch_B = {{ value = 4, source = "test" }}
eval_episodes = {{ value = 1, source = "test" }}
eval_max_steps = {{ value = 50, source = "test" }}
[runner]
n_steps = {{ value = {n_steps}, source = "{why}" }}
log_interval_steps = {{ value = {log_interval_steps}, source = "test" }}
"""


def a2c_long_profile(n_steps: int, log_interval_steps: int, description: str) -> str:
    """A profile giving the setting's A2C a longer budget: long enough for a test to act mid-run."""
    return f"""
[profile]
description = "{description}"
[a2c.runner]
n_steps = {{ value = {n_steps}, source = "test" }}
log_interval_steps = {{ value = {log_interval_steps}, source = "test" }}
"""
