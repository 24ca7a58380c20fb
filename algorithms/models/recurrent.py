"""A single-layer LSTM over ``[T, B]`` sequences in which rows start new episodes.

An episode start at step t of row b zeroes that row's (h, c) before step t. ``nn.LSTM`` has no such
reset; cutting the sequence at the resets costs a fused call per cut, and early in training a
replayed R2D1 batch on MinAtar has an episode start every few steps (docs/results/r2d1_minatar_speed.md,
"The recurrent unroll"). ``lstm_with_resets`` therefore runs the LSTM as an autograd function of its
own: the input product ``x @ W_ih^T`` of all T steps is one matrix product (most of the arithmetic),
and the recurrence a tight loop of a few kernels per step, forward and backward (the backward by
hand: the gate derivatives it needs are computed for all steps at once after the forward loop, and
the ``W_hh`` and ``W_ih`` gradients are one matrix product each over all steps). Where no row
resets after step 0 and no per-step cell states are asked for, the fused ``nn.LSTM`` call is used.

PyTorch's gate order is input, forget, cell, output (``nn.LSTM`` documentation).
"""

from __future__ import annotations

import torch
from torch import nn


class _ResetLSTM(torch.autograd.Function):
    """``(x [T, B, D], w_ih [4H, D], w_hh [4H, H], bias [4H], h0 [B, H], c0 [B, H], keep [T, B, 1] or
    None) -> (out [T, B, H], cells [T, B, H])``: h and c after every step, the state multiplied by
    ``keep[t]`` before step t."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, bias, h0, c0, keep):
        T, B = x.shape[:2]
        H = w_hh.shape[1]
        gates = torch.addmm(bias, x.reshape(T * B, -1), w_ih.T).view(T, B, 4 * H)
        # tanh(a) = 2 sigmoid(2a) - 1: with the cell gate's pre-activations doubled, one sigmoid over
        # all four gates and a scale of the cell gate replace three activations on column slices per
        # step (13 instead of 26 us per step at B = 32, H = 128; tanh is the slowest of the three).
        gates[..., 2 * H : 3 * H] *= 2
        w_rec = w_hh.clone()
        w_rec[2 * H : 3 * H] *= 2
        out = x.new_empty(T, B, H)
        cells = x.new_empty(T, B, H)
        tanh_cells = x.new_empty(T, B, H)
        resets = [] if keep is None else keep.view(T, B).eq(0).any(1).nonzero().flatten().tolist()
        h, c = h0, c0
        for t in range(T):
            if resets and t == resets[0]:
                resets.pop(0)
                h, c = h * keep[t], c * keep[t]
            g = gates[t]
            g.addmm_(h, w_rec.T)
            g.sigmoid_()
            g[:, 2 * H : 3 * H].mul_(2).sub_(1)
            c = torch.addcmul(g[:, H : 2 * H] * c, g[:, :H], g[:, 2 * H : 3 * H], out=cells[t])
            torch.tanh(c, out=tanh_cells[t])
            h = torch.mul(g[:, 3 * H :], tanh_cells[t], out=out[t])
        ctx.set_materialize_grads(False)
        if any(ctx.needs_input_grad):
            ctx.save_for_backward(x, w_ih, w_hh, h0, c0, keep, gates, out, cells, tanh_cells)
        return out, cells

    @staticmethod
    def backward(ctx, grad_out, grad_cells):
        x, w_ih, w_hh, h0, c0, keep, acts, out, cells, tanh_cells = ctx.saved_tensors
        T, B, H = out.shape
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        # States before each step, after the reset: [T, B, H].
        h_before = torch.cat([h0.unsqueeze(0), out[:-1]])
        c_before = torch.cat([c0.unsqueeze(0), cells[:-1]])
        if keep is not None:
            h_before, c_before = h_before * keep, c_before * keep
        i, f, g, o = acts.split(H, dim=-1)
        # d(pre-activations of i, f, g) = dc * factor; d(pre-activation of o) = dh * o_factor;
        # dc += dh * o (1 - tanh(c)^2). Computed for all steps at once.
        factor = torch.cat([g * i * (1 - i), c_before * f * (1 - f), i * (1 - g * g)], dim=-1).view(
            T, B, 3, H
        )
        o_factor = tanh_cells * o * (1 - o)
        dc_factor = o * (1 - tanh_cells * tanh_cells)
        d_gates = torch.empty_like(acts)
        d_view = d_gates.view(T, B, 4, H)
        resets = set() if keep is None else set(keep.view(T, B).eq(0).any(1).nonzero().flatten().tolist())
        dh = grad_out[T - 1]
        dc = torch.zeros_like(dh) if grad_cells is None else grad_cells[T - 1]
        for t in range(T - 1, -1, -1):
            dc = torch.addcmul(dc, dh, dc_factor[t])
            torch.mul(dc.unsqueeze(1), factor[t], out=d_view[t, :, :3])
            torch.mul(dh, o_factor[t], out=d_view[t, :, 3])
            if t == 0:
                break
            dc = dc * f[t]
            if t in resets:
                dh = grad_out[t - 1] + (d_gates[t] @ w_hh) * keep[t]
                dc = dc * keep[t]
            else:
                dh = torch.addmm(grad_out[t - 1], d_gates[t], w_hh)
            if grad_cells is not None:
                dc = dc + grad_cells[t - 1]
        flat = d_gates.view(T * B, 4 * H)
        grad_x = grad_w_ih = grad_w_hh = grad_bias = grad_h0 = grad_c0 = None
        # Products written as (A^T B)^T: with D odd (MinAtar's 1,031 LSTM inputs) MKL runs these
        # layouts at the forward product's rate, the direct ones about 1.5x slower
        # (docs/results/r2d1_minatar_speed.md, "The recurrent unroll").
        if ctx.needs_input_grad[0]:
            grad_x = (w_ih.T @ flat.T).T.view(T, B, -1)
        if ctx.needs_input_grad[1]:
            grad_w_ih = (x.reshape(T * B, -1).T @ flat).T
        if ctx.needs_input_grad[2]:
            grad_w_hh = (h_before.reshape(T * B, H).T @ flat).T
        if ctx.needs_input_grad[3]:
            grad_bias = flat.sum(0)
        if ctx.needs_input_grad[4] or ctx.needs_input_grad[5]:
            k = 1.0 if keep is None else keep[0]
            grad_h0 = (d_gates[0] @ w_hh) * k
            grad_c0 = dc * f[0] * k
        return grad_x, grad_w_ih, grad_w_hh, grad_bias, grad_h0, grad_c0, None


def lstm_with_resets(
    lstm: nn.LSTM,
    x: torch.Tensor,
    h0: torch.Tensor,
    c0: torch.Tensor,
    reset: torch.Tensor | None,
    return_cells: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The single-layer ``lstm`` over ``x`` [T, B, D] from (h0, c0) [B, H], zeroing a row's state
    before step t where ``reset[t]`` [T, B] (None: no resets).

    Returns ``(out [T, B, H], h [B, H], c [B, H], cells)``: the outputs (h after every step), the
    final state and, with ``return_cells``, the cell states after every step [T, B, H] (else None).
    """
    if reset is not None and not bool(reset.any()):
        reset = None
    if reset is None and not return_cells:
        out, (h, c) = lstm(x, (h0.unsqueeze(0), c0.unsqueeze(0)))
        return out, h[0], c[0], None
    keep = None if reset is None else (~reset).to(x.dtype).unsqueeze(-1)
    bias = lstm.bias_ih_l0 + lstm.bias_hh_l0
    out, cells = _ResetLSTM.apply(x, lstm.weight_ih_l0, lstm.weight_hh_l0, bias, h0, c0, keep)
    return out, out[-1], cells[-1], cells if return_cells else None


def stepwise_lstm(lstm: nn.LSTM, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
                  reset: torch.Tensor | None,
                  return_cells: bool = False) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """``models.recurrent.lstm_with_resets`` one step at a time in plain tensor operations, which
    ``torch.func`` transforms can batch (the fused kernel and the hand-written recurrence there have
    no batching rule): the single-layer ``lstm`` over ``x`` [T, B, D] from (h, c) [B, H], the state
    zeroed before step t where ``reset[t]``. Returns the outputs [T, B, H], the final (h, c) [B, H]
    and the cell states [T, B, H] (whatever ``return_cells`` says: they cost nothing extra here)."""
    projected = x @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0  # [T, B, 4H]
    keep = None if reset is None else (~reset.reshape(x.shape[0], -1, 1)).to(x.dtype)
    outputs, cells = [], []
    for t in range(x.shape[0]):
        if keep is not None:
            h, c = h * keep[t], c * keep[t]
        # PyTorch's gate order: input, forget, cell, output.
        i, f, g, o = (projected[t] + h @ lstm.weight_hh_l0.T).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
        cells.append(c)
    return torch.stack(outputs), h, c, torch.stack(cells)
