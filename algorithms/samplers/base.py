"""The sampler interface every sampling mode implements (Contract 3).

Interface (``BaseSampler``; ``make_sampler`` picks the class of ``SamplerConfig.mode``)::

    sampler = SomeSampler(env_config, agent, sampler_config, seed, start_env_steps=0, agent_factory=...)
    sampler.initialize()                      # build envs (and workers); reset every env
    samples, traj_infos = sampler.sample(itr) # one [T, B] batch, see below
    rows = sampler.evaluate(n_episodes, env_steps)  # eval-mode episodes on separate envs
    sampler.shutdown()                        # idempotent; also on errors

``agent`` is the learner's agent: the serial sampler acts with it directly; parallel modes copy
its parameters to their workers (``registry.AgentFactory`` builds the copies). The runner sets the
agent's mode (``agent.set_mode("sample", env_steps)``) before each ``sample`` call.

``samples`` is a ``NamedArrays`` of CPU torch tensors, [T, B, ...] (T = ``batch_T``, B =
``batch_B``), fields in this order: ``observation`` (what the agent acted on at t), ``action``,
``reward``, ``terminated``, ``truncated``, ``final_observation`` (env step t, Contract 1),
``prev_action``, ``prev_reward`` (of t-1, zero at the first step of an episode), ``agent_info``,
``env_info``, and ``bootstrap``: a [B] ``NamedArrays`` of the inputs at step T
(``observation, prev_action, prev_reward``, plus ``agent_state`` for recurrent agents).
The batch is the sampler's own buffer: the next ``sample`` call overwrites it, so an algorithm
copies what it keeps (replay appends copy; on-policy updates finish before the next call).

``traj_infos`` is one dict per *game* episode that ended during the batch: ``return`` (raw,
unclipped), ``length`` (env steps), ``env_rank``. With ``EnvConfig.episodic_life`` a life loss is
terminal for the learner (state and prev action reset) but does not end a game, so it is no
episode here.

The per-step logic the modes share, so that every mode produces identical samples for identical
seeds, is ``algorithms.samplers.stepper`` (``EnvStepper``, ``StepWriter``, ``record_example``, ...);
the seeding rule of envs and exploration is ``algorithms.samplers.seeding`` (``env_seed``,
``exploration_streams``). The batch's shape is ``algorithms.arrays.BatchSpec``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from algorithms.arrays import BatchSpec, NamedArrays
from algorithms.samplers.seeding import env_seed, exploration_streams

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.envs.config import EnvConfig
    from algorithms.run_config import SamplerConfig

__all__ = ["BaseSampler", "env_spaces"]


def env_spaces(env_config: EnvConfig) -> tuple[Any, Any]:
    """(observation_space, action_space) of one env of ``env_config``, to build the agent from."""
    from algorithms.envs.factory import make_vec_env

    env = make_vec_env(env_config, 1, 0)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


class BaseSampler(ABC):
    """Common constructor and evaluation for every sampling mode (see the module docstring).

    Evaluation is the same in every mode: the learner's agent in ``eval`` mode on
    ``config.eval_n_envs`` separate envs in this process (``EvalSampler``), built on first use.
    """

    # The fewest envs a batch of this mode holds (checked when the sampler is built).
    min_batch_B = 1

    def __init__(
        self,
        env_config: EnvConfig,
        agent: Agent,
        config: SamplerConfig,
        seed: int,
        start_env_steps: int = 0,
        *,
        agent_factory: Any = None,
    ) -> None:
        self.env_config = env_config
        self.agent = agent
        self.agent_factory = agent_factory
        self.config = config
        self.seed = int(seed)
        self.start_env_steps = int(start_env_steps)
        self.batch_spec = BatchSpec(config.batch_T, config.batch_B)
        self._eval_sampler: Any = None
        if config.batch_B < self.min_batch_B:
            raise ValueError(
                f"SamplerConfig.batch_B must be >= {self.min_batch_B} for mode {config.mode!r}, "
                f"got {config.batch_B}"
            )

    @abstractmethod
    def initialize(self) -> None:
        """Build envs (and workers) and reset every env; call once before ``sample``."""

    @abstractmethod
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        """Collect one [T, B] batch with the agent's current parameters and mode."""

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of this sampler's worker processes (for monitoring and shutdown checks): none
        where it samples in this process alone."""
        return []

    def evaluate(self, n_episodes: int, env_steps: int) -> list[dict[str, Any]]:
        """``n_episodes`` eval-mode episodes: dicts with ``episode``, ``return`` (raw), ``length``."""
        return self.evaluator().evaluate(n_episodes, env_steps)

    def evaluator(self) -> Any:
        """The ``EvalSampler``, built on first use."""
        if self._eval_sampler is None:
            from algorithms.samplers.evaluation import EvalSampler

            self._eval_sampler = EvalSampler(
                self.env_config,
                self.agent,
                n_envs=self.config.eval_n_envs,
                seed=env_seed(self.seed, "eval", self.start_env_steps),
                max_steps=self.config.eval_max_steps,
                streams=exploration_streams(self.seed, "eval", self.start_env_steps),
            )
        return self._eval_sampler

    def state_dict(self) -> dict[str, Any] | None:
        """What a resumed run needs to sample on as if it had not stopped (taken between batches):
        ``start_env_steps`` (its seeds' origin), the envs' and the agent inputs' state, the
        exploration streams' positions, and the evaluation envs' state once built. None where this
        mode or these envs cannot save it: a resumed run then starts fresh episodes from seeds that
        depend on the resume step (``algorithms.samplers.seeding``)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict``'s state (after ``initialize``; its objects unpickled by
        ``resume.unpickle_tree``); the sampler was built with its ``start_env_steps``."""
        raise NotImplementedError(f"{type(self).__name__} saves no state")

    def evaluator_state(self) -> dict[str, Any] | None:
        """The evaluation envs' part of ``state_dict`` (None before the first evaluation)."""
        return None if self._eval_sampler is None else self._eval_sampler.state_dict()

    def load_evaluator_state(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            self.evaluator().load_state_dict(state)

    def shutdown(self) -> None:
        """Close envs and workers; safe to call more than once."""
        if self._eval_sampler is not None:
            self._eval_sampler.close()
            self._eval_sampler = None
