"""``recurrent.lstm_with_resets`` against a slow step-by-step reference: outputs, cell states, final
state and every gradient, on sequences with no reset, one, and many (resets at step 0 and in the last
step included)."""

import pytest
import torch
from torch import nn

from algorithms.models.recurrent import lstm_with_resets


def reference(lstm: nn.LSTM, x, h, c, reset):
    """One ``nn.LSTMCell`` step at a time with the LSTM's weights, zeroing the state where ``reset``."""
    cell = nn.LSTMCell(lstm.input_size, lstm.hidden_size).to(x.dtype)
    cell.weight_ih, cell.weight_hh = lstm.weight_ih_l0, lstm.weight_hh_l0
    cell.bias_ih, cell.bias_hh = lstm.bias_ih_l0, lstm.bias_hh_l0
    outputs, cells = [], []
    for t in range(x.shape[0]):
        if reset is not None:
            keep = (~reset[t]).to(x.dtype).unsqueeze(-1)
            h, c = h * keep, c * keep
        h, c = cell(x[t], (h, c))
        outputs.append(h)
        cells.append(c)
    return torch.stack(outputs), h, c, torch.stack(cells)


def resets(kind: str, T: int, B: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    reset = torch.zeros(T, B, dtype=torch.bool)
    if kind == "all_false":
        return reset
    if kind == "one":
        reset[T // 2, 1] = True
        return reset
    generator = torch.Generator().manual_seed(3)
    reset = torch.rand(T, B, generator=generator) < 0.3
    reset[0, 0] = reset[-1, 2] = True
    return reset


@pytest.mark.parametrize("kind", ["none", "all_false", "one", "many"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lstm_with_resets_equals_the_step_by_step_reference_with_gradients(kind, dtype):
    torch.manual_seed(0)
    T, B, D, H = 9, 4, 7, 5
    lstm = nn.LSTM(D, H).to(dtype)
    reset = resets(kind, T, B)
    x = torch.randn(T, B, D, dtype=dtype, requires_grad=True)
    h0 = torch.randn(B, H, dtype=dtype, requires_grad=True)
    c0 = torch.randn(B, H, dtype=dtype, requires_grad=True)
    inputs = [x, h0, c0, *lstm.parameters()]
    # Weights on every output so that each one's gradient path is checked.
    w_out, w_cells = torch.randn(T, B, H, dtype=dtype), torch.randn(T, B, H, dtype=dtype)
    w_h, w_c = torch.randn(B, H, dtype=dtype), torch.randn(B, H, dtype=dtype)
    tol = {"atol": 1e-10, "rtol": 1e-9} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}

    def loss(out, h, c, cells):
        total = (out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum()
        return total if cells is None else total + (cells * w_cells).sum()

    for return_cells in (False, True):
        expected = reference(lstm, x, h0, c0, reset)
        got = lstm_with_resets(lstm, x, h0, c0, reset, return_cells=return_cells)
        assert (got[3] is not None) == return_cells
        for a, b in zip(got, expected):
            if a is not None:
                torch.testing.assert_close(a, b, **tol)
        want = torch.autograd.grad(loss(*expected[:3], expected[3] if return_cells else None), inputs)
        grads = torch.autograd.grad(loss(*got), inputs)
        for name, a, b in zip(["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"], grads, want):
            torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_lstm_with_resets_needs_no_grad_and_gives_the_same_values_under_inference_mode():
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 4)
    x, h0, c0 = torch.randn(7, 3, 6), torch.randn(3, 4), torch.randn(3, 4)
    reset = resets("many", 7, 3)
    with torch.no_grad():
        expected = reference(lstm, x, h0, c0, reset)
    with torch.inference_mode():
        got = lstm_with_resets(lstm, x, h0, c0, reset, return_cells=True)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
