"""Value rescaling (round trip, hand values, registry) and replay priorities (R2D2 mixing, IS weights)."""

import math

import numpy as np
import pytest
import torch

from algorithms.functional.priorities import importance_weights, sequence_priority
from algorithms.functional.value_rescaling import (
    signed_hyperbolic,
    signed_parabolic,
    value_transform,
)

torch.set_num_threads(1)


def test_signed_hyperbolic_hand_computed():
    x = torch.tensor([3.0, -8.0, 0.0, 0.5], dtype=torch.float64)
    expected = torch.tensor(
        [1.0 + 0.003, -2.0 - 0.008, 0.0, math.sqrt(1.5) - 1 + 0.0005], dtype=torch.float64
    )
    torch.testing.assert_close(signed_hyperbolic(x), expected)
    torch.testing.assert_close(signed_parabolic(expected), x)


def _wide_range(dtype, limit):
    grid = torch.linspace(-limit, limit, 100_001, dtype=dtype)
    logs = torch.logspace(-8, math.log10(limit), 2_000, dtype=dtype)
    return torch.cat([grid, logs, -logs])


@pytest.mark.parametrize("dtype, limit", [(torch.float64, 1e6), (torch.float32, 1e6)])
def test_round_trip_to_1e_5_relative(dtype, limit):
    x = _wide_range(dtype, limit)
    for there, back in ((signed_hyperbolic, signed_parabolic), (signed_parabolic, signed_hyperbolic)):
        y = back(there(x))
        # Relative to |x| everywhere, down to |x| = 1e-8 (the cancellation-free forms make this hold).
        relative = ((y - x).abs() / x.abs().clamp(min=1e-30)).max().item()
        assert relative < 1e-5, (there.__name__, dtype, relative)


def test_registry_by_name():
    h = value_transform("signed_hyperbolic")
    x = torch.randn(10, dtype=torch.float64) * 100
    torch.testing.assert_close(h.inverse(h.forward(x)), x)
    ident = value_transform("identity")
    assert ident.forward(x) is x and ident.inverse(x) is x
    with pytest.raises(ValueError, match="unknown value transform 'sqrt'; known"):
        value_transform("sqrt")


def test_sequence_priority_hand_computed():
    td = torch.tensor([[1.0, -2.0], [3.0, 0.5], [-2.0, 1.0]])  # [T=3, B=2]
    # Column 0: max 3, mean 2 -> 0.9*3 + 0.1*2; column 1: max 2, mean 3.5/3.
    torch.testing.assert_close(sequence_priority(td, eta=0.9), torch.tensor([2.9, 1.8 + 0.35 / 3]))
    valid = torch.tensor([[True, True], [False, True], [False, False]])
    # Column 0 keeps only |1|; column 1 keeps |-2| and |0.5|: max 2, mean 1.25.
    torch.testing.assert_close(sequence_priority(td, eta=0.9, valid=valid), torch.tensor([1.0, 1.8 + 0.125]))
    torch.testing.assert_close(sequence_priority(td, eta=0.0), td.abs().mean(0))
    with pytest.raises(ValueError, match=r"sequences \[1\] have no valid step"):
        sequence_priority(td, 0.9, valid=torch.tensor([[True, False]] * 3))
    with pytest.raises(ValueError, match="must be \\[T, B\\]"):
        sequence_priority(td[0], 0.9)


def test_importance_weights_hand_computed():
    p = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)
    # (N P)^-1 with N = 8: [0.25, 0.5, 1], already max-normalised.
    torch.testing.assert_close(
        importance_weights(p, beta=1.0), torch.tensor([0.25, 0.5, 1.0], dtype=torch.float64)
    )
    torch.testing.assert_close(
        importance_weights(p, beta=0.5), torch.tensor([0.5, math.sqrt(0.5), 1.0], dtype=torch.float64)
    )
    torch.testing.assert_close(importance_weights(p, beta=0.0), torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="positive probability"):
        importance_weights(torch.tensor([0.5, 0.0]), beta=0.5)


def test_importance_weights_accept_numpy():
    p = np.array([0.5, 0.25, 0.125])
    np.testing.assert_allclose(importance_weights(p, beta=1.0), [0.25, 0.5, 1.0])
