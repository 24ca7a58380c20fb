"""What an algorithm file imports from the learner families (``algorithms.learners``): what
``optimize`` returns to the runner (docs/ARCHITECTURE.md, Contract 4), the optimizers, and each
family's shared learner: ``QReplayLearner`` (DQN, C51, Rainbow, R2D1), ``PgLearner`` (A2C, PPO) and
``QpgAlgo`` with ``QpgConfig`` (DDPG, TD3, SAC). It binds no ``Config``, ``build_agent`` or
``Algo``, so the registry does not take it for an algorithm (``algorithms.registry``).
"""

from algorithms.learners.common import OptInfo, RMSprop, WithoutCompiler, adam, minimize, run_step_hooks
from algorithms.learners.policy_gradient import PgLearner, anneal_fraction, validate_pg_config
from algorithms.learners.q_replay import QReplayLearner
from algorithms.learners.qpg import Critics, QpgAlgo, QpgConfig, ReplayFeed

__all__ = [
    "Critics",
    "OptInfo",
    "PgLearner",
    "QReplayLearner",
    "QpgAlgo",
    "QpgConfig",
    "RMSprop",
    "ReplayFeed",
    "WithoutCompiler",
    "adam",
    "anneal_fraction",
    "minimize",
    "run_step_hooks",
    "validate_pg_config",
]
