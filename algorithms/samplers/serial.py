"""The serial sampler: the reference mode, one process, the learner's agent acting on B envs.

Every other mode must produce the same samples as this one for the same seed (see
``algorithms.samplers.stepper`` for the shared per-step logic, ``algorithms.samplers.seeding`` for
the seeding rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays
from algorithms.samplers.base import BaseSampler
from algorithms.samplers.seeding import env_seed, exploration_streams
from algorithms.samplers.stepper import EnvStepper, StepWriter, allocate_samples, record_example


class SerialSampler(BaseSampler):
    """Steps ``batch_B`` envs (one vector env) for ``batch_T`` steps per ``sample`` call.

    ``first_rank`` / ``global_batch`` place these envs in a larger set (the DDP runner gives rank r
    the global env ranks ``[r * B, (r + 1) * B)`` of ``world_size * B``): envs are seeded as those
    ranks of one vector env and the agent's per-env exploration (epsilons, random streams) sees the
    global ranks.
    """

    def __init__(
        self, *args: Any, first_rank: int = 0, global_batch: int | None = None, **kwargs: Any
    ) -> None:
        """``BaseSampler``'s arguments, and where these envs sit among all (class docstring)."""
        super().__init__(*args, **kwargs)
        B = self.batch_spec.B
        self.first_rank = int(first_rank)
        self.global_batch = int(global_batch or self.first_rank + B)
        if self.first_rank < 0 or self.first_rank + B > self.global_batch:
            raise ValueError(
                f"SerialSampler: env ranks [{first_rank}, {first_rank + B}) "
                f"do not fit a global batch of {self.global_batch}"
            )
        self.env: Any = None

    def initialize(self) -> None:
        from algorithms.envs.factory import make_vec_env

        B = self.batch_spec.B
        seed = env_seed(self.seed, "train", self.start_env_steps)
        self.env = make_vec_env(self.env_config, B, seed, first_rank=self.first_rank)
        ranks = np.arange(self.first_rank, self.first_rank + B)
        streams = exploration_streams(self.seed, "train", self.start_env_steps)
        self.agent.set_env_ranks(ranks, self.global_batch, streams)
        example = record_example(self.env.observation_space, self.env.action_space, self.agent)
        self.buffer = allocate_samples(example, self.batch_spec)
        self.writer = StepWriter(self.buffer)
        self.stepper = EnvStepper(self.env, self.agent, ranks)
        self.stepper.reset(example.action)

    @torch.no_grad()
    def sample(self, itr: int) -> tuple[NamedArrays, list[dict[str, Any]]]:
        finished = self.stepper.collect(self.writer, self.batch_spec.T)
        return self.buffer.replace(bootstrap=self.stepper.bootstrap()), [info for _, info in finished]

    def state_dict(self) -> dict[str, Any] | None:
        env = self.env.state_dict()
        if env is None:
            return None
        return {
            "start_env_steps": self.start_env_steps,
            "env": env,
            "stepper": self.stepper.state_dict(),
            "streams": self.agent.streams.state_dict(),
            "eval": self.evaluator_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.stepper.load_state_dict(state["stepper"])
        self.agent.streams.load_state_dict(state["streams"])
        self.load_evaluator_state(state["eval"])

    def shutdown(self) -> None:
        super().shutdown()
        if self.env is not None:
            self.env.close()
            self.env = None
