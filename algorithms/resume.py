"""The pieces of a checkpoint that make a resumed run equal the uninterrupted one: replay contents,
random generators, the sampler's envs (``RunnerConfig.checkpoint_replay``, ``algorithms.runners.sync``).

Checkpoints are read with ``torch.load(weights_only=True)``, which rebuilds tensors and plain
containers of numbers and strings but no other object. So arrays go in as tensors
(``arrays_state``, restored in place by ``load_arrays``), a numpy generator's state as its JSON
text (``generator_state``: its 128-bit integers need no special pickling), and ``NamedArrays`` as
nested dicts (``tree_state``). Env objects (a MinAtar game, a gymnasium classic-control env) have
no such form: ``pickle_objects`` pickles them into a uint8 tensor, and ``unpickle_objects`` reads
them back with an unpickler that can name only numpy's array, dtype and random-generator
constructors and classes of the env packages (see ``EnvUnpickler``), never an arbitrary callable:
a damaged or crafted checkpoint can at worst build a broken env, not run code.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from algorithms.arrays import NamedArrays

# checkpoint_replay = "auto" saves the replay when its arrays take at most this many bytes: a
# MinAtar replay (tens of MB) goes in, a 1M-step Atari one (~7 GB, docs/step_accounting.md) does not.
AUTO_REPLAY_LIMIT_BYTES = 1 << 30


def prefixed(prefix: str, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """``arrays`` with every name under ``prefix.`` (components' arrays gathered into one dict)."""
    return {f"{prefix}.{name}": value for name, value in arrays.items()}


# Arrays of at least this many bytes go into a checkpoint without their all-zero trailing rows
# (``arrays_state``): a replay is allocated whole and filled row by row, so until it wraps the rest
# is zeros (an Atari smoke job's latest checkpoint: 273 -> 199 MB, docs/results/resume_exact.md).
TRIM_MIN_BYTES = 1 << 16


def arrays_state(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{name: tensor}`` sharing the arrays' memory (no copy until ``torch.save`` writes them), with
    two compact forms that ``load_arrays`` expands exactly:

    * a bool array as ``{"bits": uint8 tensor, "shape": [...]}``, eight values a byte: MinAtar's
      observations are bool channel maps, 90% of an R2D1 replay's bytes (docs/results/resume_exact.md);
    * an array of ``TRIM_MIN_BYTES`` or more whose last rows (first axis) are all zero bytes as
      ``{"head": <its leading rows in either form above>, "shape": [...]}``: only the rows up to the
      last one holding a nonzero byte. Bytes, not values, so that a -0.0 stays -0.0."""
    return {name: _trimmed_state(np.asarray(array)) for name, array in arrays.items()}


def _trimmed_state(array: np.ndarray) -> Any:
    if array.ndim == 0 or array.nbytes < TRIM_MIN_BYTES or not array.flags.c_contiguous:
        return _array_state(array)
    rows = _rows_in_use(array)
    if rows == len(array):
        return _array_state(array)
    return {"head": _array_state(array[:rows]), "shape": list(array.shape)}


def _rows_in_use(array: np.ndarray) -> int:
    """1 + the index of the last row (first axis) with a nonzero byte; 0 for an all-zero array.
    Scans from the end in blocks, so a full array costs one block."""
    rows = array.reshape(len(array), -1).view(np.uint8)
    block = max(1, (1 << 22) // max(1, rows.shape[1]))  # about 4 MB a block
    end = len(rows)
    while end > 0:
        start = max(0, end - block)
        used = np.flatnonzero(rows[start:end].any(axis=1))
        if used.size:
            return start + int(used[-1]) + 1
        end = start
    return 0


def _array_state(array: np.ndarray) -> Any:
    if array.dtype == np.bool_:
        return {"bits": torch.from_numpy(np.packbits(array.reshape(-1))), "shape": list(array.shape)}
    return torch.from_numpy(array)


def _array_from_state(value: Any) -> np.ndarray:
    if isinstance(value, Mapping) and "bits" in value:
        shape = [int(n) for n in value["shape"]]
        bits = np.unpackbits(value["bits"].numpy(), count=int(np.prod(shape)))
        return bits.view(np.bool_).reshape(shape)
    return value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def load_arrays(arrays: Mapping[str, np.ndarray], state: Mapping[str, Any], owner: str) -> None:
    """Copy ``state``'s tensors into ``arrays`` in place (views of them stay valid), each checked
    for its name, shape and dtype: ``ValueError`` naming ``owner`` and the first mismatch."""
    missing = sorted(set(arrays) - set(state))
    if missing:
        raise ValueError(f"{owner}: the checkpoint lacks {missing[0]!r}")
    for name, array in arrays.items():
        saved = state[name]
        trimmed = isinstance(saved, Mapping) and "head" in saved
        head = _array_from_state(saved["head"] if trimmed else saved)
        shape = tuple(int(n) for n in saved["shape"]) if trimmed else head.shape
        fits = head.shape[1:] == array.shape[1:] and (not trimmed or len(head) <= len(array))
        if shape != array.shape or head.dtype != array.dtype or not fits:
            raise ValueError(
                f"{owner}: {name} saved as {head.dtype}{list(shape)}, "
                f"this run's is {array.dtype}{list(array.shape)}"
            )
        if trimmed:
            array[: len(head)] = head
            array[len(head) :] = 0
        else:
            array[...] = head


def nbytes(state: Any) -> int:
    """Bytes of the tensors in a nested state (dicts, lists, tensors)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, Mapping):
        return sum(nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(nbytes(v) for v in state)
    return 0


def generator_state(generator: np.random.Generator) -> str:
    """A numpy ``Generator``'s position as JSON text (``set_generator_state`` restores it)."""
    return json.dumps(generator.bit_generator.state)


def set_generator_state(generator: np.random.Generator, state: str) -> None:
    generator.bit_generator.state = json.loads(state)


def tree_state(tree: NamedArrays | None) -> dict[str, Any] | None:
    """A ``NamedArrays`` of arrays or tensors as nested ``{field: tensor}`` dicts (copies)."""
    if tree is None:
        return None
    out: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, NamedArrays):
            out[name] = tree_state(value)
        elif isinstance(value, torch.Tensor):
            out[name] = value.detach().cpu().clone()
        elif value is not None:
            out[name] = torch.from_numpy(np.array(value, copy=True))
    return out


def tree_from_state(state: Mapping[str, Any] | None) -> NamedArrays | None:
    """The ``NamedArrays`` of tensors ``tree_state`` wrote."""
    if state is None:
        return None
    return NamedArrays(
        {name: tree_from_state(v) if isinstance(v, Mapping) else v for name, v in state.items()}
    )


# The key of a dict holding pickled objects in a checkpoint (``unpickle_tree`` finds them).
PICKLED = "pickled"


def pickle_objects(objects: Any) -> torch.Tensor:
    """``objects`` pickled, as a uint8 tensor (``unpickle_objects`` reads it)."""
    data = pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


class EnvUnpickler(pickle.Unpickler):
    """An unpickler that names only what env objects are made of (see the module docstring):
    numpy's reconstructors of arrays, dtypes, scalars and random generators, and classes of
    gymnasium and ``algorithms.envs`` already imported (the resumed run built its envs first),
    never importing a module. A MinAtar game is pickled by ``MinAtarEnv`` as its attributes, not as
    an object of its class: naming the class would import the ``minatar`` package, which is slow and
    swallows Ctrl-C (``algorithms.envs.minatar``)."""

    NUMPY = {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._pickle", "__randomstate_ctor"),
        ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
        ("numpy.random.bit_generator", "SeedSequence"),
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._mt19937", "MT19937"),
    }
    CLASS_MODULES = ("gymnasium.", "algorithms.envs.")

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.NUMPY:
            return super().find_class(module, name)
        if module.startswith(self.CLASS_MODULES) and module in sys.modules:
            found = getattr(sys.modules[module], name, None)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"env state names {module}.{name}, which is not an env's part")


def unpickle_objects(data: torch.Tensor) -> Any:
    """The objects ``pickle_objects`` pickled, read by ``EnvUnpickler``."""
    return EnvUnpickler(io.BytesIO(data.numpy().tobytes())).load()


def unpickle_tree(state: Any) -> Any:
    """``state`` with every ``{PICKLED: tensor}`` dict replaced by the objects it holds
    (``UnpicklingError`` when one names anything ``EnvUnpickler`` refuses)."""
    if isinstance(state, Mapping):
        if set(state) == {PICKLED}:
            return unpickle_objects(state[PICKLED])
        return {key: unpickle_tree(value) for key, value in state.items()}
    return state
