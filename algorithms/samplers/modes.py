"""The sampler modes by name: ``SAMPLERS`` maps ``SamplerConfig.mode`` to its class and
``make_sampler`` builds one. Kept apart from ``base`` (the interface every mode subclasses) so that the
registry's names, which ``tests/test_layers.py`` counts as imports, run one way: modes -> each
mode -> base.
"""

from __future__ import annotations

import importlib
from typing import Any

from algorithms.samplers.base import BaseSampler

# SamplerConfig.mode -> "module:class"; every class takes BaseSampler's constructor arguments.
SAMPLERS: dict[str, str] = {
    "serial": "algorithms.samplers.serial:SerialSampler",
    "cpu": "algorithms.samplers.parallel_cpu:ParallelCpuSampler",
    "gpu": "algorithms.samplers.parallel_gpu:ParallelGpuSampler",
    "alternating": "algorithms.samplers.alternating:AlternatingSampler",
}


def make_sampler(mode: str, *args: Any, **kwargs: Any) -> BaseSampler:
    """The sampler for ``mode`` (a key of ``SAMPLERS``), built with ``BaseSampler``'s arguments."""
    if mode not in SAMPLERS:
        raise ValueError(f"unknown sampler mode {mode!r}; known: {sorted(SAMPLERS)}")
    module, name = SAMPLERS[mode].split(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(*args, **kwargs)
