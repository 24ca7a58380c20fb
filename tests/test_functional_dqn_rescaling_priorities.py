"""Value rescaling (round trip, hand values, registry, the rescaled n-step target) and replay
priorities (R2D2 mixing, IS weights)."""

import math

import numpy as np
import pytest
import torch

from algorithms.functional.priorities import importance_weights, sequence_priority
from algorithms.functional.returns import rescaled_nstep_targets
from algorithms.functional.value_rescaling import (
    identity,
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


def test_every_transform_takes_x_and_eps():
    x = torch.tensor([3.0, -8.0], dtype=torch.float64)
    for name in ("identity", "signed_hyperbolic"):
        h = value_transform(name)
        torch.testing.assert_close(h.inverse(h.forward(x, 1e-3), 1e-3), x)
    assert identity(x, 0.5) is x
    # eps reaches h: h(3) = 1 + eps * 3.
    torch.testing.assert_close(value_transform("signed_hyperbolic").forward(x[:1], 0.1), x.new_tensor([1.3]))


# Two envs over T = 3 steps, gamma = 0.5, n = 2, rewards 1, 2, 4 in both; env 0 terminates at t = 1,
# env 1 hits a time limit at t = 0 (the caller has put its final observation's value at index 1).
# Bootstrap values per observation index 0..3, before the transform: 3, 8, 15, 24.
REWARD = torch.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]], dtype=torch.float64)
TERMINATED = torch.tensor([[False, False], [True, False], [False, False]])
TRUNCATED = torch.tensor([[False, True], [False, False], [False, False]])
V = torch.tensor([3.0, 8.0, 15.0, 24.0], dtype=torch.float64)[:, None].expand(4, 2)


def test_rescaled_nstep_targets_identity_by_hand():
    # env 0: t=0: 1 + 0.5 * 2 = 2, the terminal ends the window, no bootstrap; t=1: 2;
    #        t=2: the window is cut at the batch end after one step: 4 + 0.5 * V[3] = 4 + 12 = 16.
    # env 1: t=0: the time limit ends the window after one step: 1 + 0.5 * V[1] = 1 + 4 = 5;
    #        t=1: 2 + 0.5 * 4 + 0.25 * V[3] = 4 + 6 = 10; t=2: 16 as for env 0.
    y = rescaled_nstep_targets(REWARD, TERMINATED, TRUNCATED, V, 0.5, 2, value_transform("identity"), 1e-3)
    torch.testing.assert_close(y, torch.tensor([[2.0, 5.0], [2.0, 10.0], [16.0, 16.0]], dtype=torch.float64))


def test_rescaled_nstep_targets_signed_hyperbolic_by_hand():
    # Stored values h(V) with eps = 1e-3: h(3) = 2 - 1 + 0.003 = 1.003, h(8) = 3 - 1 + 0.008 = 2.008,
    # h(15) = 3.015, h(24) = 4.024; h^-1 gives back V, so the sums inside h are those of the identity
    # test: y = h(2) = sqrt(3) - 1 + 0.002 = 0.73405081, h(5) = sqrt(6) - 1 + 0.005 = 1.45448974,
    # h(10) = sqrt(11) - 1 + 0.010 = 2.32662479, h(16) = sqrt(17) - 1 + 0.016 = 3.13910563.
    q = torch.tensor([1.003, 2.008, 3.015, 4.024], dtype=torch.float64)[:, None].expand(4, 2)
    h = value_transform("signed_hyperbolic")
    y = rescaled_nstep_targets(REWARD, TERMINATED, TRUNCATED, q, 0.5, 2, h, 1e-3)
    expected = torch.tensor(
        [[0.73405081, 1.45448974], [0.73405081, 2.32662479], [3.13910563, 3.13910563]], dtype=torch.float64
    )
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-8)
    # rlpyt's n-step done bug: env 0's t=0 window keeps its reward sum 2 but is not done and bootstraps
    # with 0.25 from index 2, across the episode end: h(2 + 0.25 * 15) = h(5.75) = sqrt(6.75) - 1 +
    # 0.00575 = 1.60382621. t=1 ends the episode itself: still h(2).
    bug = rescaled_nstep_targets(REWARD, TERMINATED, TRUNCATED, q, 0.5, 2, h, 1e-3, nstep_done_bug=True)
    torch.testing.assert_close(
        bug[:2, 0], torch.tensor([1.60382621, 0.73405081], dtype=torch.float64), rtol=0, atol=1e-8
    )
    with pytest.raises(ValueError, match=r"q_bootstrap shape \(3, 2\) should be \(4, 2\)"):
        rescaled_nstep_targets(REWARD, TERMINATED, TRUNCATED, q[:3], 0.5, 2, h, 1e-3)


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
