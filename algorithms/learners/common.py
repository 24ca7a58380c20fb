"""What an algorithm's ``optimize`` returns to the runner (docs/ARCHITECTURE.md, Contract 4), the
optimizer pieces every algorithm uses (the fused Adam, the mixin that keeps optimizers off the
compiler stack, the per-step profiling wrapper) and the action-space check of ``build_agent``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks


def require_action_space(action_space: gym.Space, kind: type[gym.Space], family: str) -> None:
    """``ValueError`` (one line; the planner's ``check_model_fits`` makes it a ``ConfigError``) unless
    the env's actions are ``kind`` (a 1-D ``Box`` for continuous control): an algorithm built for
    the other kind fails inside its model with an AttributeError otherwise."""
    flat = kind is not gym.spaces.Box or len(getattr(action_space, "shape", ()) or ()) == 1
    if not (isinstance(action_space, kind) and flat):
        shape = "1-D " if kind is gym.spaces.Box else ""
        raise ValueError(f"{family} takes {shape}{kind.__name__} actions; this env's are {action_space}")


@dataclass
class OptInfo:
    """Work done by one ``optimize`` call.

    ``samples_trained`` counts the steps that entered the loss; ``samples_replayed`` adds the burn-in
    steps that were run through the network but not trained on (R2D1). The runner passes both to
    ``Counters.add_updates`` so the replay ratio can be reported both ways.
    """

    updates: int = 0
    samples_trained: int = 0
    samples_replayed: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)


class WithoutCompiler:
    """An optimizer mixin: ``Optimizer``'s ``add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` without the ``torch._disable_dynamo`` wrapper, whose first call imports the
    compiler stack (``torch._dynamo``, about 1 CPU second) only to keep ``torch.compile`` from
    tracing them; nothing in this code base compiles (docs/results/r2d1_minatar_speed.md, "Startup").

    ``step`` is left unwrapped: ``Optimizer`` wraps every subclass's ``step`` for the profiler and
    step hooks (``profile_hook_step``), tens of microseconds per update (docs/results/bench_minatar.md).
    A subclass's ``step`` is decorated with ``run_step_hooks`` instead, which runs registered step
    hooks (the multi-GPU runner's gradient averaging registers one) and costs nothing without."""

    def _patch_step_function(self) -> None:
        self._zero_grad_profile_name = f"Optimizer.zero_grad#{type(self).__name__}.zero_grad"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        torch.optim.Optimizer.add_param_group.__wrapped__(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            torch.optim.Optimizer.zero_grad.__wrapped__(self, set_to_none)
            return
        for group in self.param_groups:  # what Optimizer.zero_grad does here, without its profiling
            for p in group["params"]:
                p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return torch.optim.Optimizer.state_dict.__wrapped__(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        torch.optim.Optimizer.load_state_dict.__wrapped__(self, state_dict)


def run_step_hooks(step: Any) -> Any:
    """Decorates a ``WithoutCompiler`` optimizer's ``step``: where step hooks are registered (global
    or the optimizer's own), they run as ``Optimizer``'s own wrapper runs them (pre hooks may replace
    the arguments; post hooks see them); without any, ``step`` runs directly.

    With one torch thread the step itself runs with the CPU flushing denormal floats to zero
    (``torch.set_flush_denormal``; off again afterwards, torch's default). The optimizers' running
    averages decay geometrically where gradients stop (dead ReLU units): centered RMSprop's by 0.95
    per step reaches the denormal range (below 1.2e-38) after about 1,700 steps, fused Adam's first
    moment stays there for good (it rounds to 4 times the smallest denormal, never to zero), and
    every operation on those entries runs several times slower (docs/results/bench_minatar.md,
    "Denormals"). A flushed entry is an exact zero where it would have been a denormal: the update
    reads such an entry as far below ``eps`` either way, so no parameter changes
    (tests/test_optimizer_hooks.py). The setting is the calling thread's alone, and a thread that
    thread starts inherits it for good, so with more torch threads nothing is flushed: a step's
    first parallel loop could start the worker pool inside the flushed window."""

    @functools.wraps(step)
    def stepped(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        pre = (*_global_optimizer_pre_hooks.values(), *self._optimizer_step_pre_hooks.values())
        post = (*self._optimizer_step_post_hooks.values(), *_global_optimizer_post_hooks.values())
        for hook in pre:
            replaced = hook(self, args, kwargs)
            if replaced is not None:
                args, kwargs = replaced
        flush = torch.get_num_threads() == 1
        if flush:
            torch.set_flush_denormal(True)
        try:
            out = step(self, *args, **kwargs)
        finally:
            if flush:
                torch.set_flush_denormal(False)
        for hook in post:
            hook(self, args, kwargs)
        return out

    return stepped


class Adam(WithoutCompiler, torch.optim.Adam):
    """``torch.optim.Adam`` that does not import the compiler stack (``WithoutCompiler``; its
    ``step`` is wrapped in ``_use_grad_for_differentiable``, which imports ``torch._dynamo`` on every
    call for a ``torch.compile`` graph break: the same step here, gradient recording off as there)."""

    @run_step_hooks
    def step(self, closure: Any = None) -> Any:
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return torch.optim.Adam.step.__wrapped__(self, closure)


class RMSprop(WithoutCompiler, torch.optim.RMSprop):
    """``torch.optim.RMSprop`` without the compiler import, as ``Adam`` above: the same step, gradient
    recording off."""

    @run_step_hooks
    def step(self, closure: Any = None) -> Any:
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return torch.optim.RMSprop.step.__wrapped__(self, closure)


def adam(params: Iterable[Any], learning_rate: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel: one pass over all tensors of the group per step instead of the CPU
    default's per-tensor loop, same update rule up to float rounding (tests/test_qpg_algos.py,
    tests/test_algos_fused_adam.py); about 4-5x faster per step on CPU
    (docs/results/core_measurements.md, "algorithms/algos/base.py")."""
    return Adam(params, lr=learning_rate, eps=eps, fused=True)


def minimize(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One gradient step of ``optimizer`` on ``loss`` (gradients cleared first)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def nonfinite_loss(loss: float, diagnostics: dict[str, float], updates: int) -> str:
    """Why a member of a multi-member loop stopped: its loss at update ``updates`` was not finite;
    ``diagnostics``: its means until then."""
    shown = ", ".join(f"{key}={value:.4g}" for key, value in diagnostics.items())
    return f"loss became {loss} at update {updates}; last diagnostics: {shown}"
