"""Seeding of a sampler's envs and of its agent's exploration (the rule below).

Seeding rule: the envs of a sampler are seeded from the run seed only (``env_seed``), never from
the global RNGs, and the env of global rank r is seeded as env r of one vector env,
``make_vec_env(config, n, seed, first_rank=k)`` holding ranks ``k .. k + n - 1`` (the per-env
seeds are a prefix-stable ``SeedSequence`` stream), so any split of the B envs across workers or
DDP ranks sees the same episodes. A run resumed without its envs' state (``sampler.state_dict``,
``RunnerConfig.checkpoint_replay``) starts fresh episodes from a seed that also depends on the env
step it resumed at. Evaluation envs get their own stream (``role="eval"``).

The agent's exploration follows the same rule: every mode hands its agent (or each worker's copy)
``exploration_streams(seed, role, start_env_steps)`` with ``set_env_ranks``, one random stream per
global env rank (``agents.base.RankStreams``), so env r's exploration draws at its k-th step are
the same in every mode and every split of the batch. Evaluation draws from separate streams
(``role="eval"``) and never shifts training draws. The streams' positions are checkpointed with the
envs' state; a run resumed without it restarts them from a seed that depends on the env step it
resumed at.
"""

from __future__ import annotations

import numpy as np

from algorithms.agents.base import RankStreams

ENV_SEED_ROLES = {"train": 0, "eval": 1}
# Extra entropy word of exploration seeds, so that they never equal an env seed of any role.
EXPLORATION_WORD = 1


def env_seed(run_seed: int, role: str = "train", start_env_steps: int = 0) -> int:
    """The seed a sampler passes to ``make_vec_env`` for its ``role`` ("train" or "eval") envs.

    A fresh run's training envs use ``run_seed`` itself; evaluation envs and resumed segments get
    independent seeds mixed from (run seed, role, env step of the resume) by ``SeedSequence``.
    """
    if role not in ENV_SEED_ROLES:
        raise ValueError(f"env_seed: role must be one of {sorted(ENV_SEED_ROLES)}, got {role!r}")
    if role == "train" and start_env_steps == 0:
        return int(run_seed)
    words = np.random.SeedSequence(
        [int(run_seed), ENV_SEED_ROLES[role], int(start_env_steps)]
    ).generate_state(1)
    return int(words[0] & 0x7FFFFFFF)


def exploration_streams(run_seed: int, role: str = "train", start_env_steps: int = 0) -> RankStreams:
    """The agent's per-env-rank random streams for the ``role`` envs of a sampler (see the module
    docstring), seeded like ``env_seed`` but independent of every env seed."""
    if role not in ENV_SEED_ROLES:
        raise ValueError(f"exploration_streams: role must be one of {sorted(ENV_SEED_ROLES)}, got {role!r}")
    words = [int(run_seed), ENV_SEED_ROLES[role], int(start_env_steps), EXPLORATION_WORD]
    return RankStreams(int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0]))
