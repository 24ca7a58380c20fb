"""Checks that a loss is a function of its inputs, statically and by behaviour.

``impurities(fn)`` reads a loss's source: its body may read its arguments, its locals, builtins,
modules, classes, functions (the project's own are read the same way, recursively) and module
constants: UPPER_CASE names bound once at the top of their module and never rebound (no ``global``
statement, no store into them). Anything else it reads (a module flag, a mutable module object, a
closure cell, a ``global`` or ``nonlocal`` of its own) is listed.

``Spy`` checks by behaviour: put in a learner's place of its loss, it records every call the
learner's own update makes; each must return what the same call returns outside the update, on
copies of the same inputs from the same random state. State a caller sets around the call (the
module flag of ``tests/impure_loss.py``) changes the first and not the second.
"""

from __future__ import annotations

import ast
import builtins
import copy
import enum
import inspect
import sys
import textwrap
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

PROJECT_PACKAGES = ("algorithms", "tests")
_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range, enum.Enum)


def _function_tree(fn: Callable[..., Any]) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef), fn
    return node


def _local_names(func: ast.AST) -> set[str]:
    """Arguments and every name bound inside ``func`` (nested functions and lambdas included)."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.arguments):
            for arg in [*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg]:
                if arg is not None:
                    names.add(arg.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not func:
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def rebound_names(module: ModuleType) -> set[str]:
    """Module-level names the module itself rebinds or stores into: named by a ``global`` statement,
    bound more than once at the top level, or the object of a subscript or attribute store."""
    tree = ast.parse(inspect.getsource(module))
    counts: dict[str, int] = {}
    for statement in tree.body:
        targets = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            targets = [statement.target]
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    counts[node.id] = counts.get(node.id, 0) + (
                        2 if isinstance(statement, ast.AugAssign) else 1
                    )
    rebound = {name for name, n in counts.items() if n > 1}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            rebound.update(node.names)
        elif isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            root = node.value
            while isinstance(root, ast.Subscript | ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name):
                rebound.add(root.id)
    return rebound


def _is_constant(value: Any) -> bool:
    """An immutable value, a class or a function, or a tuple of them (a NamedTuple of functions)."""
    if isinstance(value, tuple | frozenset):
        return all(_is_constant(item) for item in value)
    return isinstance(value, _IMMUTABLE) or inspect.isclass(value) or inspect.isroutine(value)


def _is_project(obj: Any) -> bool:
    return getattr(obj, "__module__", "").split(".")[0] in PROJECT_PACKAGES


def impurities(fn: Callable[..., Any], _seen: set[Any] | None = None) -> list[str]:
    """What ``fn`` (and the project functions it calls by name) reads besides its arguments, locals,
    builtins, modules, classes, functions and module constants (module docstring); [] if nothing."""
    seen = set() if _seen is None else _seen
    if fn in seen:
        return []
    seen.add(fn)
    module = sys.modules[fn.__module__]
    where = f"{fn.__module__}.{fn.__qualname__}"
    func = _function_tree(fn)
    local = _local_names(func)
    rebound = rebound_names(module)
    found: list[str] = []
    if fn.__code__.co_freevars:
        found.append(f"{where} reads closure cells {list(fn.__code__.co_freevars)}")
    for node in ast.walk(func):
        if isinstance(node, ast.Global | ast.Nonlocal):
            found.append(f"{where} declares {type(node).__name__.lower()} {node.names}")
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in local:
            continue
        name = node.id
        if name not in vars(module):
            if not hasattr(builtins, name):
                found.append(f"{where} reads {name!r}, which is neither an argument nor a module name")
            continue
        value = vars(module)[name]
        if inspect.ismodule(value) or inspect.isclass(value) or inspect.isbuiltin(value):
            continue
        if inspect.isfunction(value):
            if _is_project(value):
                found.extend(impurities(value, seen))
            continue
        if callable(value) and not _is_project(type(value)):
            continue  # a library callable (functools.partial, a torch op object)
        if name in rebound:
            found.append(f"{where} reads {name!r}, which its module rebinds or stores into")
        elif not (name.isupper() and (_is_constant(value) or _frozen_table(value))):
            found.append(f"{where} reads module state {name!r} ({type(value).__name__})")
    return list(dict.fromkeys(found))


def _frozen_table(value: Any) -> bool:
    """A constant table (a registry): a dict of constants to constants."""
    return isinstance(value, dict) and all(_is_constant(k) and _is_constant(v) for k, v in value.items())


def _snapshot(value: Any) -> Any:
    """A copy of a loss's result: tensors cloned, containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_snapshot(v) for v in value))
    if isinstance(value, tuple | list):
        return type(value)(_snapshot(v) for v in value)
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a.detach(), b.detach())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


class Spy:
    """Wraps a loss: each call made through it is recorded with copies of its arguments and the
    random state it started from, then runs the loss."""

    def __init__(self, loss: Callable[..., Any]) -> None:
        self.loss = loss
        self.calls: list[tuple[tuple[Any, ...], torch.Tensor, Any]] = []

    def __call__(self, *args: Any) -> Any:
        copies = copy.deepcopy(args)
        rng = torch.get_rng_state()
        out = self.loss(*args)
        self.calls.append((copies, rng, _snapshot(out)))  # callers add to the diagnostics afterwards
        return out

    def mismatches(self) -> list[str]:
        """The recorded calls whose result differs from the same call's outside the update."""
        assert self.calls, "the update never called the loss"
        found = []
        for i, (args, rng, inside) in enumerate(self.calls):
            saved = torch.get_rng_state()
            torch.set_rng_state(rng)
            try:
                outside = self.loss(*args)
            finally:
                torch.set_rng_state(saved)
            if not _equal(inside, outside):
                found.append(
                    f"call {i} of {self.loss.__module__}.{self.loss.__name__}: {inside!r} != {outside!r}"
                )
        return found
