"""The probe replay algorithm of ``async_probe_algo`` behind ``optimize`` alone (no async extension),
registered as ``"probe_optimize_only"``: how an algorithm that only implements Contract 4's
``optimize`` runs under the asynchronous runner."""

from __future__ import annotations

import async_probe_algo as probe

from algorithms import registry
from algorithms.algos.base import OptInfo
from algorithms.arrays import NamedArrays

registry.ALGORITHMS.setdefault("probe_optimize_only", __name__)


class Config(probe.Config):
    """Defined here so that unpickling it in the sampler process imports (and registers) this module."""


build_agent = probe.build_agent


class Algo:
    def __init__(self, config: Config, agent: probe.ProbeQAgent, counters_frameskip: int, batch_spec) -> None:
        self._inner = probe.Algo(config, agent, counters_frameskip, batch_spec)

    def optimize(self, itr: int, samples: NamedArrays) -> OptInfo:
        return self._inner.optimize(itr, samples)

    def state_dict(self) -> dict:
        return self._inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._inner.load_state_dict(state)
