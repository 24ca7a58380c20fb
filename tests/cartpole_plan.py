"""A two-arm CartPole plan file with an [analysis] section, for the tests of the freeze and of the
dry run's checks: ``PLAN.format(head=..., endpoint=...)`` puts lines in the section's head and after
its one endpoint; ``GOOD_PLAN`` is the valid one."""

PLAN = """
[plan]
title = "t"
arms = ["dqn_cartpole", "ppo_cartpole_zoo"]
envs = ["CartPole-v1"]
envs_source = "test"

[analysis]
alpha = 0.05
seeds = "0-1"
{head}
[[analysis.endpoints]]
kind = "game"
game = "CartPole-v1"
baseline = "dqn_cartpole"
candidate = "ppo_cartpole_zoo"
sides = "greater"
{endpoint}
"""
GOOD_HEAD = 'correction = "holm"'
GOOD_PLAN = PLAN.format(head=GOOD_HEAD, endpoint="")
