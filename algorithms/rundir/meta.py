"""What a run records about where it ran (metadata.json: code version, packages, interpreter,
hardware, seeds, the values in effect its config declares) and the global RNG states a checkpoint
saves. torch is imported inside the functions that need it, so reading runs never pulls it in.
"""

from __future__ import annotations

import json
import os
import platform
import random
import socket
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np

from algorithms.rundir.atomic import _now
from algorithms.rundir.layout import CODE_STATE_ENV

# Packages whose versions every run records (those that change numbers or speed).
RECORDED_PACKAGES = (
    "torch", "numpy", "gymnasium", "ale-py", "mujoco", "pandas", "scipy", "rliable", "ray",
    "stable-baselines3",
)  # fmt: skip


def git_output(args: list[str], cwd: Path) -> str | None:
    """stdout of ``git ARGS`` run in ``cwd``, stripped; None when git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_models() -> list[str]:
    # Imported here so reading runs never pulls in torch.
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def git_state(code_dir: Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the code's checkout (default: this repository); dirty means tracked files
    with uncommitted changes (new run directories are untracked and do not count). None where git
    cannot tell (no git, not a checkout). Code shipped without its ``.git`` (to a Ray node) carries
    the state of the checkout it came from in ``CODE_STATE_ENV``, which answers for this repository."""
    shipped = os.environ.get(CODE_STATE_ENV)
    if shipped and code_dir is None:
        state = json.loads(shipped)
        return state["commit"], state["dirty"]
    code_dir = Path(code_dir or Path(__file__).resolve().parents[2])  # the repository: algorithms/rundir/..
    commit = git_output(["rev-parse", "HEAD"], code_dir)
    status = git_output(["status", "--porcelain", "--untracked-files=no"], code_dir)
    return commit, None if status is None else bool(status)


def start_record(code_dir: Path | None = None) -> dict[str, Any]:
    """What this start of a run ran on: the code's commit and dirtiness, the host and the command
    (``layout.START_KEYS``)."""
    commit, dirty = git_state(code_dir)
    gpus = _gpu_models()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpus[0] if gpus else None,
        "gpu_count": len(gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "argv": sys.argv,
    }


def collect_metadata(seeds: dict[str, int], code_dir: Path | None = None) -> dict[str, Any]:
    """Everything needed to know what ran where: code version, packages, interpreter, hardware, seeds."""
    packages = {}
    for name in RECORDED_PACKAGES:
        try:
            packages[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            packages[name] = None
    return {
        **start_record(code_dir),
        "packages": packages,
        "python": sys.version.split()[0],
        "seeds": dict(seeds),
        "start_time": _now(),
    }


def declared_effective_values(section: str, config: Any) -> dict[str, dict[str, Any]]:
    """The values in effect that ``config`` declares (an optional ``effective_values()`` method of a
    Config class returning ``{field: (value, why)}``), as metadata.json records them:
    ``{"<section>.<field>": {"value": ..., "reason": ...}}``, keyed like the flattened config.json
    (``section`` is the config's key there, e.g. ``"algo_config"``). Called by duck typing so this
    module imports no algorithm; a class without the method declares none (``{}``)."""
    declare = getattr(config, "effective_values", None)
    if declare is None:
        return {}
    return {f"{section}.{name}": {"value": value, "reason": why} for name, (value, why) in declare().items()}


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (and CUDA) global RNG states as tensors/ints (safe for weights_only load)."""
    import torch

    py_version, py_state, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": {
            "version": py_version,
            "state": torch.tensor(py_state, dtype=torch.int64),
            "gauss": py_gauss,
        },
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
