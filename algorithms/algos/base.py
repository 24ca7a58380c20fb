"""What an algorithm file imports from the learner families (``algorithms.learners``): what
``optimize`` returns to the runner (docs/ARCHITECTURE.md, Contract 4), the optimizers, and each
family's shared learner: ``QReplayLearner`` (DQN, C51, Rainbow, R2D1), ``PgLearner`` (A2C, PPO) and
``QpgAlgo`` with ``QpgConfig`` (DDPG, TD3, SAC). It binds no ``Config``, ``build_agent`` or
``Algo``, so the registry does not take it for an algorithm (``algorithms.registry``).
"""

import gymnasium as gym

from algorithms.learners.common import OptInfo, RMSprop, WithoutCompiler, adam, minimize, run_step_hooks
from algorithms.learners.policy_gradient import PgLearner, anneal_fraction, validate_pg_config
from algorithms.learners.q_replay import QReplayLearner
from algorithms.learners.qpg import Critics, QpgAlgo, QpgConfig, ReplayFeed


def require_action_space(action_space: gym.Space, kind: type[gym.Space], family: str) -> None:
    """``ValueError`` (one line; the planner's ``check_model_fits`` makes it a ``ConfigError``) unless
    the env's actions are ``kind`` (a 1-D ``Box`` for continuous control): an algorithm built for
    the other kind fails inside its model with an AttributeError otherwise."""
    flat = kind is not gym.spaces.Box or len(getattr(action_space, "shape", ()) or ()) == 1
    if not (isinstance(action_space, kind) and flat):
        shape = "1-D " if kind is gym.spaces.Box else ""
        raise ValueError(f"{family} takes {shape}{kind.__name__} actions; this env's are {action_space}")


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
    "require_action_space",
    "run_step_hooks",
    "validate_pg_config",
]
