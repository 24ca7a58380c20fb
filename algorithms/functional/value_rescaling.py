"""Invertible value rescaling, chosen by name.

R2D2 (Kapturowski et al. 2019, Sec. 2.3) replaces reward clipping with the transform of Pohlen et
al. (2018, "Observe and Look Further", Sec. 3.2):

    h(x)      = sign(x) (sqrt(|x| + 1) - 1) + eps x
    h^{-1}(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)   (Prop. A.2)

with eps = 1e-3, used in the n-step target as h(G + gamma^n h^{-1}(Q_target))
(``returns.rescaled_nstep_targets``). The names follow rlax (``signed_hyperbolic`` /
``signed_parabolic``). Every transform takes ``(x, eps)``, the identity too, so a caller applies
whichever is configured without asking which it is. The inverse is evaluated in a cancellation-free form:
(sqrt(1 + y) - 1) / (2 eps) = 2 (|x| + 1 + eps) / (sqrt(1 + y) + 1) with y = 4 eps (|x| + 1 + eps),
and a^2 - 1 = (a - 1)(a + 1); h itself uses sqrt(|x| + 1) - 1 = |x| / (sqrt(|x| + 1) + 1). Both
directions are free of cancellation, so float32 round trips stay accurate down to tiny |x|.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

DEFAULT_EPS = 1e-3  # R2D2 Sec. 2.3; Pohlen et al. (2018) Sec. 3.2


def signed_hyperbolic(x: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018, Sec. 3.2), elementwise."""
    if eps <= 0:
        raise ValueError(f"signed_hyperbolic: eps={eps} must be positive")
    abs_x = x.abs()
    # sqrt(|x| + 1) - 1 written as |x| / (sqrt(|x| + 1) + 1): exact for tiny |x| in float32 too.
    return torch.sign(x) * abs_x / (torch.sqrt(abs_x + 1) + 1) + eps * x


def signed_parabolic(x: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """h^{-1}(x), the exact inverse of :func:`signed_hyperbolic` (Pohlen et al. 2018, Prop. A.2)."""
    if eps <= 0:
        raise ValueError(f"signed_parabolic: eps={eps} must be positive")
    abs_x = x.abs()
    z = abs_x + 1 + eps
    root = torch.sqrt(1 + 4 * eps * z)
    a = 2 * z / (root + 1)  # = (root - 1) / (2 eps), without the cancellation
    # a - 1 = (2z - 1 - root) / (root + 1), and 2z - 1 - root = ((2z - 1)^2 - root^2) / (2z - 1 + root)
    # = 4 z |x| / (2z - 1 + root): no difference of nearly equal numbers anywhere.
    a_minus_1 = 4 * z * abs_x / ((2 * z - 1 + root) * (root + 1))
    return torch.sign(x) * a_minus_1 * (a + 1)


def identity(x: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """No rescaling (``value_rescaling = "identity"``); ``eps`` is taken only to share the signature."""
    return x


class ValueTransform(NamedTuple):
    """h and h^{-1}, each called as ``(x, eps)``."""

    forward: Callable[[torch.Tensor, float], torch.Tensor]
    inverse: Callable[[torch.Tensor, float], torch.Tensor]


VALUE_TRANSFORMS: dict[str, ValueTransform] = {
    "identity": ValueTransform(identity, identity),
    "signed_hyperbolic": ValueTransform(signed_hyperbolic, signed_parabolic),
}


def value_transform(name: str) -> ValueTransform:
    """The (forward, inverse) pair registered under ``name``."""
    try:
        return VALUE_TRANSFORMS[name]
    except KeyError:
        raise ValueError(f"unknown value transform {name!r}; known: {sorted(VALUE_TRANSFORMS)}") from None
