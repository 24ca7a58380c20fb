"""The harness's optimizers skip ``Optimizer``'s per-step wrapper (algorithms/learners/common.py,
``WithoutCompiler``) but must still run registered step hooks: the multi-GPU runner averages the
critics' gradients over ranks in a global step pre-hook (algorithms/runners/ddp.py); without it
the SAC replicas drifted apart."""

import subprocess
import sys

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from algorithms.algos.dqn import CenteredRMSprop
from algorithms.learners.common import RMSprop, adam


def _optimizers(param):
    return {
        "adam": adam([param], learning_rate=0.1),
        "centered_rmsprop": CenteredRMSprop([param], lr=0.1, alpha=0.95, eps=0.01),
        "rmsprop": RMSprop([param], lr=0.1, alpha=0.99, eps=1e-5),  # A2C's
    }


@pytest.mark.parametrize("name", ["adam", "centered_rmsprop", "rmsprop"])
def test_global_and_own_step_hooks_run_around_the_step(name):
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = _optimizers(param)[name]
    calls = []

    def halve_gradient(opt, args, kwargs):  # a pre hook sees the gradient before the step
        calls.append(("global pre", opt is optimizer, param.grad.clone()))
        param.grad.mul_(0.5)

    handles = [
        register_optimizer_step_pre_hook(halve_gradient),
        register_optimizer_step_post_hook(
            lambda opt, a, k: calls.append(("global post", param.data.clone()))
        ),
        optimizer.register_step_pre_hook(lambda opt, a, k: calls.append(("own pre",))),
        optimizer.register_step_post_hook(lambda opt, a, k: calls.append(("own post",))),
    ]
    try:
        param.grad = torch.full((3,), 2.0)
        optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    assert [c[0] for c in calls] == ["global pre", "own pre", "own post", "global post"]
    assert calls[0][1] and torch.equal(calls[0][2], torch.full((3,), 2.0))
    assert torch.equal(param.grad, torch.ones(3))  # the step used the halved gradient
    assert torch.equal(calls[3][1], param.data) and not torch.equal(param.data, torch.ones(3))


@pytest.mark.parametrize("name", ["adam", "centered_rmsprop", "rmsprop"])
def test_a_hooked_step_equals_the_plain_step_with_the_hooks_effect(name):
    hooked, plain = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))

    def halve_gradient(opt, args, kwargs):
        opt.param_groups[0]["params"][0].grad.mul_(0.5)

    handle = register_optimizer_step_pre_hook(halve_gradient)
    try:
        hooked.grad = torch.tensor([2.0, -4.0, 6.0])
        _optimizers(hooked)[name].step()
    finally:
        handle.remove()
    plain.grad = torch.tensor([1.0, -2.0, 3.0])
    _optimizers(plain)[name].step()
    assert torch.equal(hooked.data, plain.data)


def test_a2c_rmsprop_steps_as_torchs_without_importing_the_compiler():
    """A2C's optimizer: the same parameters as ``torch.optim.RMSprop`` after several steps, and no
    ``torch._dynamo`` import on the way (about 1 CPU s of a job's startup,
    docs/results/r2d1_minatar_speed.md)."""
    code = """
import sys, torch
from algorithms.learners.common import RMSprop
def run(optimizer_class):
    p = torch.nn.Parameter(torch.linspace(-1, 1, 5))
    opt = optimizer_class([p], lr=0.01, alpha=0.99, eps=1e-5)
    for step in range(4):
        p.grad = torch.sin(p.detach() * (step + 1))
        opt.step()
    return p.data
ours = run(RMSprop)
dynamo = "torch._dynamo" in sys.modules  # before torch's own optimizer imports it
print(torch.equal(ours, run(torch.optim.RMSprop)), dynamo)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]


def _torchs_own(name, param):
    """The same optimizer as ``_optimizers(param)[name]``, as torch ships it (nothing flushed)."""
    return {
        "adam": lambda: torch.optim.Adam([param], lr=0.1, fused=True),
        "centered_rmsprop": lambda: torch.optim.RMSprop([param], lr=0.1, alpha=0.95, eps=0.01, centered=True),
        "rmsprop": lambda: torch.optim.RMSprop([param], lr=0.1, alpha=0.99, eps=1e-5),
    }[name]()


def _denormal(tensors):
    tiny = torch.finfo(torch.float32).tiny
    return sum(int(((t.abs() < tiny) & (t != 0)).sum()) for t in tensors)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("name", "steps"), [("adam", 900), ("centered_rmsprop", 1800), ("rmsprop", 9000)])
def test_steps_flush_denormals_and_change_no_parameter(name, steps, threads):
    """Half the entries stop getting gradients after 20 steps (dead units): their running averages
    decay into the denormal range in torch's own optimizer (checked), where with one torch thread the
    harness's are flushed to zero (with two, as torch's), and the parameters stay bit for bit the
    same. Flushing is off again after each step. The harness's optimizer steps first: a worker pool
    started inside a flushed step would flush torch's too."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ours, own = _step_both(name, steps)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(ours[0].data, own[0].data)
    states = [[v for k, v in opt.state[p].items() if k != "step"] for p, opt in (ours, own)]
    assert _denormal(states[1]) > 0
    assert _denormal(states[0]) == (0 if threads == 1 else _denormal(states[1]))
    assert float(torch.tensor([1e-30]) * torch.tensor([1e-10])) != 0.0  # denormals not flushed here


def _step_both(name, steps):
    """``steps`` steps of the harness's optimizer ``name`` and of torch's, on the same gradients."""
    generator = torch.Generator().manual_seed(0)
    ours, own = torch.nn.Parameter(torch.ones(64)), torch.nn.Parameter(torch.ones(64))
    optimizers = _optimizers(ours)[name], _torchs_own(name, own)
    for step in range(steps):
        gradient = torch.randn(64, generator=generator)
        if step >= 20:
            gradient[32:] = 0.0
        for param, optimizer in zip((ours, own), optimizers):
            param.grad = gradient.clone()
            optimizer.step()
    return (ours, optimizers[0]), (own, optimizers[1])
