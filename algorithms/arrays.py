"""Structured [T, B, ...] arrays: one object whose fields index, slice and assign together.

`NamedArrays` plays the role of rlpyt's `namedarraytuple` (rlpyt/utils/collections.py), with
three differences that matter in practice:

* it is one module-level class holding an ordered mapping of fields, so it pickles by value and
  works under the ``spawn`` start method (rlpyt built a new class per call, which could not be
  pickled and broke its multiprocessing on macOS and Python >= 3.8);
* leaves may be numpy arrays, torch tensors, nested ``NamedArrays`` or ``None`` (an absent field
  that indexing and assignment skip);
* shared-memory buffers are torch tensors in shared memory, which torch's multiprocessing
  reductions send to a child process by handle, not by value: a child that writes into its copy
  writes into the parent's buffer. ``.numpy()`` on such a buffer gives views, not copies.

Dimensions are named in docstrings: ``T`` time, ``B`` batch (environments), then the per-step shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

# Importing torch.multiprocessing registers the reductions that send shared tensors by handle.
import torch.multiprocessing

# Field names already validated: samplers build several NamedArrays per env step with the same few
# names, and a set lookup is cheaper than re-checking each name.
_CHECKED_NAMES: set[str] = set()


class BatchSpec(NamedTuple):
    """Shape of one sampler batch, a [T, B] ``NamedArrays``: ``T`` time steps of ``B`` environments."""

    T: int
    B: int

    @property
    def size(self) -> int:
        return self.T * self.B


class NamedArrays:
    """An ordered set of named leaves that share leading dimensions.

    ``x[idx]`` indexes every leaf with ``idx`` and returns a new ``NamedArrays`` (views where the
    library gives views); ``x[idx] = y`` assigns leaf by leaf from another ``NamedArrays`` with the
    same fields, or broadcasts one value to every leaf. ``x["name"]`` and ``x.name`` return a field.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        items = dict(fields or {})
        items.update(kwargs)
        for name in items:
            if name not in _CHECKED_NAMES:
                if not name.isidentifier() or name.startswith("_"):
                    raise ValueError(
                        f"NamedArrays: field name {name!r} must be an identifier not starting with '_'"
                    )
                _CHECKED_NAMES.add(name)
        object.__setattr__(self, "_fields", items)

    # --- field access -------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self._fields)

    def keys(self) -> Iterator[str]:
        return iter(self._fields)

    def values(self) -> Iterator[Any]:
        return iter(self._fields.values())

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self._fields.items())

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"NamedArrays has no field {name!r}; fields are {self.fields}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._fields:
            raise AttributeError(f"NamedArrays has no field {name!r}; use replace() to add fields")
        self._fields[name] = value

    def replace(self, **kwargs: Any) -> NamedArrays:
        """A shallow copy with some fields replaced or added."""
        new = dict(self._fields)
        new.update(kwargs)
        return NamedArrays(new)

    # --- indexing -----------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            return self._fields[index]
        return NamedArrays({k: (None if v is None else v[index]) for k, v in self._fields.items()})

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, str):
            raise TypeError(
                "NamedArrays: assign a field with attribute syntax or replace(), not x['name'] = ..."
            )
        by_field = isinstance(value, NamedArrays)  # else one value goes into every field
        if by_field:
            extra = set(value._fields) - set(self._fields)
            if extra:
                raise KeyError(f"NamedArrays assignment: source has fields {sorted(extra)} the target lacks")
        for k, dst in self._fields.items():
            if dst is None:
                continue
            if by_field and k not in value._fields:
                raise KeyError(f"NamedArrays assignment: source lacks field {k!r}")
            src = value._fields[k] if by_field else value
            if by_field and src is None:  # a field the source leaves unset keeps its values
                continue
            if isinstance(dst, NamedArrays):
                dst[index] = src
            else:
                dst[index] = _as_leaf_like(src, dst)

    # --- whole-structure operations -------------------------------------------------------------
    def map(self, fn: Callable[[Any], Any]) -> NamedArrays:
        """Apply ``fn`` to every non-None leaf, recursing into nested fields."""
        return NamedArrays(
            {
                k: (v.map(fn) if isinstance(v, NamedArrays) else (None if v is None else fn(v)))
                for k, v in self.items()
            }
        )

    def leaves(self) -> list[Any]:
        """The non-None leaves in field order, nested fields flattened in place.

        A list, not a generator: the samplers flatten a step record on every env step, and nested
        generators cost several times as much there."""
        out: list[Any] = []
        for v in self._fields.values():
            if isinstance(v, NamedArrays):
                out.extend(v.leaves())
            elif v is not None:
                out.append(v)
        return out

    def flat_items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """(dotted name, leaf) pairs, e.g. ``("agent_info.q", array)``."""
        for k, v in self._fields.items():
            name = f"{prefix}{k}"
            if isinstance(v, NamedArrays):
                yield from v.flat_items(name + ".")
            elif v is not None:
                yield name, v

    def to_torch(self, device: torch.device | str | None = None) -> NamedArrays:
        """numpy leaves become tensors sharing their memory (``torch.from_numpy``); tensors pass through.

        With ``device`` set, leaves are moved there (a copy when the device differs).
        """
        return self.map(lambda v: to_torch(v, device))

    def numpy(self) -> NamedArrays:
        """CPU tensor leaves become numpy views of the same memory; numpy leaves pass through."""
        return self.map(to_numpy)

    def share_memory_(self) -> NamedArrays:
        """Move every tensor leaf to shared memory in place (numpy leaves are an error)."""
        for leaf in self.leaves():
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    "share_memory_() needs torch leaves; allocate with buffer_from_example(shared=True)"
                )
            leaf.share_memory_()
        return self

    # --- plumbing -----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return self._fields

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_fields", state)

    def __eq__(self, other: object) -> bool:
        """Structural equality: same fields and equal leaves (exact, elementwise)."""
        if not isinstance(other, NamedArrays) or self.fields != other.fields:
            return False
        for a, b in zip(self.values(), other.values()):
            if a is None or b is None:
                if a is not b:
                    return False
            elif isinstance(a, NamedArrays):
                if a != b:
                    return False
            elif not np.array_equal(to_numpy(a), to_numpy(b)):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        def describe(v: Any) -> str:
            if isinstance(v, NamedArrays | type(None)):
                return repr(v)
            if isinstance(v, np.ndarray | torch.Tensor):
                return f"{type(v).__name__}{tuple(v.shape)}:{v.dtype}"
            return repr(v)

        inner = ", ".join(f"{k}={describe(v)}" for k, v in self.items())
        return f"NamedArrays({inner})"


def to_torch(value: Any, device: torch.device | str | None = None) -> Any:
    """numpy array -> tensor without a copy (same memory); tensor -> itself (moved if ``device``)."""
    if isinstance(value, NamedArrays):
        return value.to_torch(device)
    if isinstance(value, np.ndarray):
        t = torch.from_numpy(value)
    elif isinstance(value, torch.Tensor):
        t = value
    else:
        t = torch.as_tensor(value)
    return t if device is None else t.to(device)


def to_numpy(value: Any) -> Any:
    """CPU tensor -> numpy view of the same memory; numpy passes through; GPU tensors are copied to host."""
    if isinstance(value, NamedArrays):
        return value.numpy()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _as_leaf_like(value: Any, like: np.ndarray | torch.Tensor) -> Any:
    """Make ``value`` assignable into ``like`` (numpy into tensor slots and back, on the right device)."""
    if isinstance(like, torch.Tensor):
        if isinstance(value, np.ndarray | np.generic):
            return torch.from_numpy(np.asarray(value)).to(like.device)
        if isinstance(value, torch.Tensor) and value.device != like.device:
            return value.to(like.device)
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


def buffer_from_example(
    example: Any,
    leading_shape: tuple[int, ...] | int,
    *,
    shared: bool = False,
    fill: float = 0,
) -> Any:
    """Allocate a buffer with ``leading_shape`` (e.g. ``(T, B)``) in front of every leaf of ``example``.

    ``example`` is one step: a ``NamedArrays`` of arrays, tensors, Python scalars, nested
    ``NamedArrays`` or ``None``; each leaf keeps its dtype. Plain numpy by default; with
    ``shared=True`` every leaf is a torch tensor in shared memory that can be passed to a ``spawn``
    child (write through ``.numpy()`` views on either side).
    """
    if isinstance(leading_shape, int):
        leading_shape = (leading_shape,)
    leading_shape = tuple(int(n) for n in leading_shape)
    if example is None:
        return None
    if isinstance(example, NamedArrays):
        return NamedArrays(
            {k: buffer_from_example(v, leading_shape, shared=shared, fill=fill) for k, v in example.items()}
        )
    if isinstance(example, torch.Tensor):
        arr = np.full(leading_shape + tuple(example.shape), fill, dtype=to_numpy(example[None][:0]).dtype)
    else:
        ex = np.asarray(example)
        arr = np.full(leading_shape + ex.shape, fill, dtype=ex.dtype)
    if shared:
        return torch.from_numpy(arr).share_memory_()
    return arr


def concatenate(items: list[NamedArrays], axis: int = 0) -> NamedArrays:
    """Concatenate structures with the same fields along ``axis`` (numpy or torch leaves)."""
    first = items[0]
    out = {}
    for k, v in first.items():
        parts = [it[k] for it in items]
        if v is None:
            out[k] = None
        elif isinstance(v, NamedArrays):
            out[k] = concatenate(parts, axis)
        elif isinstance(v, torch.Tensor):
            out[k] = torch.cat(parts, dim=axis)
        else:
            out[k] = np.concatenate(parts, axis=axis)
    return NamedArrays(out)
