"""Packed runs: K independent members of one setting (seeds) trained in one process.

On a CPU, small networks (MinAtar, classic control, MLP policies) spend much of an update on
per-operation overhead (dispatch, autograd, optimizer bookkeeping), which K separate runs pay K
times. A packed run stacks the members' parameters and computes all members' updates at once
(``stack``, ``learners``), while every member keeps its own envs, exploration streams, replay,
counters and run directory (``runner``): member k computes what a single run with seed k computes,
up to float rounding (tests/test_packed.py), and its run directory is a single run's.

``pack.train_packed(configs, run_dirs)`` is ``algorithms.train.train`` for a pack; ``pack.check_packable``
says why configs cannot share a process. A pack is one setting over seeds, and optionally over envs
whose observation and action spaces agree (MinAtar's games with the full action set and the same
number of channels). Supported: the replay-based Q-learners (DQN and its
options, C51, Rainbow, R2D1), feed-forward PPO without the KL stop, and DDPG, TD3 and SAC, with the
serial sampler and the synchronous runner.
"""
