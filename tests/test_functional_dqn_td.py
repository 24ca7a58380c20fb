"""TD targets, losses and the C51 projection against hand-computed values and a slow Alg. 1 loop."""

import numpy as np
import pytest
import torch

from algorithms.functional.td import (
    categorical_cross_entropy,
    categorical_projection,
    categorical_target,
    double_q_learning_target,
    huber_loss,
    q_learning_target,
    select_action_values,
    squared_loss,
)

torch.set_num_threads(1)


def test_q_learning_and_double_q_targets_hand_computed():
    q_target_t = torch.tensor([[1.0, 3.0, 2.0], [0.0, -1.0, 4.0]])
    q_online_t = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 9.0]])
    return_n = torch.tensor([1.0, 2.0])
    discount_n = torch.tensor([0.5, 0.0])  # the second window reached a terminal
    torch.testing.assert_close(q_learning_target(return_n, discount_n, q_target_t), torch.tensor([2.5, 2.0]))
    # Online net picks action 0 in row 0 (target value 1.0), not the target net's argmax (3.0).
    torch.testing.assert_close(
        double_q_learning_target(return_n, discount_n, q_target_t, q_online_t), torch.tensor([1.5, 2.0])
    )
    torch.testing.assert_close(
        select_action_values(q_target_t, torch.tensor([2, 1])), torch.tensor([2.0, -1.0])
    )


def test_targets_work_over_time_and_batch_dims():
    q = torch.randn(4, 3, 5)
    out = q_learning_target(torch.zeros(4, 3), torch.ones(4, 3), q)
    torch.testing.assert_close(out, q.max(-1).values)


def test_target_shape_errors():
    with pytest.raises(ValueError, match="q_target_t must be"):
        q_learning_target(torch.zeros(3), torch.zeros(3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="q_online_t shape"):
        double_q_learning_target(torch.zeros(3), torch.zeros(3), torch.zeros(3, 2), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="discount_n shape"):
        q_learning_target(torch.zeros(3), torch.zeros(2), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="integer"):
        select_action_values(torch.zeros(3, 2), torch.zeros(3))


def test_huber_and_squared_loss_hand_computed():
    x = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 2.0], requires_grad=True)
    loss = huber_loss(x)
    torch.testing.assert_close(loss, torch.tensor([2.5, 0.5, 0.125, 0.0, 0.125, 1.5]))
    loss.sum().backward()
    # The gradient is the TD error clipped to [-1, 1] (Mnih et al. 2015).
    torch.testing.assert_close(x.grad, torch.tensor([-1.0, -1.0, -0.5, 0.0, 0.5, 1.0]))
    torch.testing.assert_close(huber_loss(torch.tensor([3.0]), delta=2.0), torch.tensor([4.0]))
    torch.testing.assert_close(squared_loss(torch.tensor([-3.0, 2.0])), torch.tensor([4.5, 2.0]))
    with pytest.raises(ValueError, match="delta=0"):
        huber_loss(x, delta=0)


@pytest.mark.parametrize("delta", [1.0, 2.5])
def test_huber_gradient_is_the_clipped_error_exactly(delta):
    x = (torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 3).requires_grad_()
    huber_loss(x, delta).sum().backward()
    assert torch.equal(x.grad, x.detach().clamp(-delta, delta))
    expected = torch.where(x.abs() <= delta, 0.5 * x**2, delta * (x.abs() - 0.5 * delta))
    torch.testing.assert_close(huber_loss(x, delta), expected)


ATOMS = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # K = 5, delta_z = 1


@pytest.mark.parametrize(
    "return_n, discount_n, probs_t, expected",
    [
        # -2 + 0.5 = -1.5: half way between atoms 0 and 1.
        (0.5, 1.0, [1, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0]),
        # Terminal (discount 0): all mass at 0.25 -> 0.75 on atom 0.0, 0.25 on atom 1.0.
        (0.25, 0.0, [0.2] * 5, [0, 0, 0.75, 0.25, 0]),
        # Exact hits: [-1, 0, 1, 2, 3] -> the last is clipped to v_max and lands on atom 2.0.
        (1.0, 1.0, [0.2] * 5, [0, 0.2, 0.2, 0.2, 0.4]),
        # Clipping at both ends.
        (10.0, 1.0, [0.1, 0.2, 0.3, 0.2, 0.2], [0, 0, 0, 0, 1]),
        (-10.0, 0.5, [0.1, 0.2, 0.3, 0.2, 0.2], [1, 0, 0, 0, 0]),
        # Contraction: 0.5 * [-2..2] = [-1, -0.5, 0, 0.5, 1] with mass 0.2 each.
        (0.0, 0.5, [0.2] * 5, [0, 0.3, 0.4, 0.3, 0]),
    ],
)
def test_categorical_target_hand_computed(return_n, discount_n, probs_t, expected):
    out = categorical_target(
        torch.tensor([return_n]),
        torch.tensor([discount_n]),
        torch.tensor([probs_t], dtype=torch.float32),
        ATOMS,
    )
    torch.testing.assert_close(out, torch.tensor([expected], dtype=torch.float32), atol=1e-6, rtol=0)


def _projection_reference(values, probs, atoms):
    """Bellemare et al. (2017), Alg. 1, one sample and one atom at a time."""
    v_min, v_max, K = atoms[0], atoms[-1], len(atoms)
    dz = (v_max - v_min) / (K - 1)
    out = np.zeros((values.shape[0], K))
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            tz = min(max(values[i, j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[i, lo] += probs[i, j]
            else:
                out[i, lo] += probs[i, j] * (hi - b)
                out[i, hi] += probs[i, j] * (b - lo)
    return out


def test_categorical_projection_matches_reference_loop():
    rng = np.random.default_rng(0)
    atoms = np.linspace(-10, 10, 51)
    values = rng.normal(scale=8, size=(64, 51))
    values[:5] = atoms  # exact hits
    probs = rng.dirichlet(np.ones(51), size=64)
    out = categorical_projection(torch.from_numpy(values), torch.from_numpy(probs), torch.from_numpy(atoms))
    np.testing.assert_allclose(out.numpy(), _projection_reference(values, probs, atoms), atol=1e-12)
    np.testing.assert_allclose(out.sum(-1).numpy(), 1.0, atol=1e-12)


def test_categorical_projection_keeps_leading_dims_and_checks_shapes():
    probs = torch.softmax(torch.randn(3, 4, 5), -1)
    out = categorical_target(torch.zeros(3, 4), torch.ones(3, 4), probs, ATOMS)
    torch.testing.assert_close(out, probs)  # identity transform: every value lands on its own atom
    with pytest.raises(ValueError, match="atoms but the support"):
        categorical_target(torch.zeros(3), torch.ones(3), torch.ones(3, 4) / 4, ATOMS)
    with pytest.raises(ValueError, match="increasing"):
        categorical_projection(torch.zeros(1, 2), torch.ones(1, 2) / 2, torch.tensor([1.0, 1.0]))


def test_categorical_cross_entropy_hand_computed():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    target = torch.tensor([[0.0, 1.0, 0.0]])
    torch.testing.assert_close(
        categorical_cross_entropy(target, logits), torch.tensor([np.log(4.0)], dtype=torch.float32)
    )
