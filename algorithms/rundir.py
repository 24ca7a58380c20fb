"""Run directories: the on-disk format every run writes and analysis reads.

Layout (docs/ARCHITECTURE.md, Contract 5)::

    runs/<experiment>/<arm>/<env>/seed<k>/
        config.json  metadata.json  status.json  progress.csv  eval.csv  checkpoints/latest.pt  tb/  log.txt

Crash safety: JSON files and checkpoints are written to a temporary file in the same directory,
fsynced, then renamed over the target (``os.replace`` is atomic on POSIX), so a reader sees the old
or the new file, never half of one. Tables are appended one row at a time with flush + fsync; a
kill can leave at most a torn last line, which ``read_table`` drops and reports.

Integrity under faults (issue 19):

* **One writer.** ``RunDir.open`` takes an exclusive ``flock`` on ``<run>/.lock`` and holds it until
  ``close``; the kernel drops it when the process dies, so a kill never leaves a stale lock. A second
  process finds it taken (``RunBusy``, ``lock_holder``) and writes nothing.
* **Checkpoints.** A new checkpoint is written to a temporary file, verified (every zip member's
  CRC, ``verify_checkpoint``), and only then renamed over ``latest.pt``, the old one kept as
  ``previous.pt``.
* **Recovery on every start** (``RunDir.recover``): stale temporary files are removed; a
  ``latest.pt`` that does not load is replaced by ``previous.pt``, or dropped when that does not
  load either; then ``progress.csv`` and ``eval.csv`` are cut back to the checkpoint's env steps, or
  emptied without one, so the tables always agree with the state the run continues from.
* **Tables agree with the checkpoint's own log.** A checkpoint records the env steps of the last
  progress row written before it (``runner.last_log_steps``); when ``progress.csv`` lacks that row
  after the cut (a torn or lost last row: a copy cut short, a damaged disk), the run resumes from
  ``previous.pt`` when the table agrees with that one, else starts afresh, and says so in one line.
* **Reading.** ``read_run`` calls a run whose ``env_steps`` repeat or go backwards, or whose rows
  are not rows of numbers, corrupt: two writers or an unrepaired restart wrote it, and its counters
  cannot be trusted. A run whose ``status.json`` says complete but whose ``progress.csv`` ends in a
  torn row is read with a note, and is not finished for ``is_complete``: rerunning its plan
  repairs it.
* **Unreadable directories** (permissions) raise ``RunUnreadable``, one line naming the directory.

This module imports torch only inside the checkpoint functions, so ``analysis`` can read runs
without importing the training stack.
"""

from __future__ import annotations

import csv
import datetime as _dt
import fcntl
import io
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

CONFIG_FILE = "config.json"
METADATA_FILE = "metadata.json"
STATUS_FILE = "status.json"
PROGRESS_FILE = "progress.csv"
EVAL_FILE = "eval.csv"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_FILE = "latest.pt"
PREVIOUS_CHECKPOINT_FILE = "previous.pt"
LOCK_FILE = ".lock"
TENSORBOARD_DIR = "tb"
LOG_FILE = "log.txt"

EVAL_COLUMNS = ("env_steps", "frames", "updates", "wall_time_s", "episode", "return", "length")
# Packages whose versions every run records (those that change numbers or speed).
RECORDED_PACKAGES = (
    "torch", "numpy", "gymnasium", "ale-py", "mujoco", "pandas", "scipy", "rliable", "ray",
    "stable-baselines3",
)  # fmt: skip

# metadata.json key of the values in effect that other config fields set (``declared_effective_values``).
EFFECTIVE_VALUES_KEY = "effective_values"

RunStatus = Literal["complete", "incomplete", "corrupt"]
RunState = Literal["running", "complete", "failed", "interrupted"]


# --- atomic writes ------------------------------------------------------------------------------
def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(
        path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode()
    )


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# --- one writer per run directory --------------------------------------------------------------
class RunBusy(Exception):
    """Another process holds the run directory's lock: this one must not write there."""


class RunUnreadable(ValueError):
    """A run directory, or one above it, that this process may not read (its permissions); ``str``
    is one line naming it. A ``ValueError`` so that the analysis and report commands, which turn bad
    input into one line, do so here too."""

    @classmethod
    def from_error(cls, error: OSError, path: Path) -> RunUnreadable:
        where = error.filename or path
        return cls(f"{where}: {error.strerror or error} (check its permissions)")


# Locks this process holds, by resolved run path: [fd, RunDir objects open on it]. Within one process
# the RunDir objects share the lock (a test or a tool may open a run twice); between processes the
# kernel's flock keeps one writer.
_HELD: dict[str, list[int]] = {}


def _lock_key(run_dir: Path) -> str:
    return str(Path(run_dir).resolve())


def take_lock(run_dir: Path) -> int:
    """The descriptor of ``run_dir``'s lock file (created if needed) with its exclusive ``flock``
    taken, this pid written in it; ``RunBusy`` naming the holder when another process has it. For a
    scheduler handing the lock to the job it starts (``LOCK_FDS_ENV``); a writer uses ``acquire_lock``."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError as error:
        raise RunUnreadable.from_error(error, run_dir) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = lock_holder(run_dir)
        who = f"pid {holder}" if holder else "another process"
        raise RunBusy(f"{run_dir}: {who} is writing this run directory (it holds {LOCK_FILE})") from None
    _write_holder(fd)
    return fd


def _write_holder(fd: int) -> None:
    # The holder's pid, for ``RunBusy``'s message; informational only, the flock is the lock.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


# A scheduler takes a run's lock before it writes the attempt's header into the run's log.txt and
# hands it to the job it starts as an inherited descriptor, named here (JSON: resolved run path ->
# descriptor), so that no other scheduler can start a job on the run between the two. A flock belongs
# to the open file, which the job then shares: the lock lasts until the job and the scheduler have
# both closed it (the scheduler closes its copy once the job has started).
LOCK_FDS_ENV = "REPRO_RUN_LOCK_FDS"
_handed: dict[str, int] | None = None


def _handed_lock(key: str) -> int | None:
    """The descriptor of ``key``'s lock handed to this process (``LOCK_FDS_ENV``), once; ``None``
    when there is none or it is not that lock file's (a stale number)."""
    global _handed
    if _handed is None:
        try:
            _handed = {str(k): int(v) for k, v in json.loads(os.environ.pop(LOCK_FDS_ENV, "{}")).items()}
        except (ValueError, TypeError, AttributeError):
            _handed = {}
    fd = _handed.pop(key, None)
    if fd is None:
        return None
    try:
        mine, there = os.fstat(fd), os.stat(Path(key) / LOCK_FILE)
    except OSError:
        return None
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        return None
    os.set_inheritable(fd, False)  # this process's own children must not keep the run locked
    return fd


def acquire_lock(run_dir: Path) -> None:
    """Take the exclusive lock of ``run_dir`` (created if needed) for this process, or raise ``RunBusy``
    naming the process that holds it; a lock its scheduler handed over (``LOCK_FDS_ENV``) is adopted.
    Pair every call with ``release_lock``."""
    key = _lock_key(run_dir)
    if key in _HELD:
        _HELD[key][1] += 1
        return
    fd = _handed_lock(key)
    if fd is None:
        fd = take_lock(run_dir)
    else:
        _write_holder(fd)
    _HELD[key] = [fd, 1]


def release_lock(run_dir: Path) -> None:
    key = _lock_key(run_dir)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # closing the only descriptor releases the flock


def lock_holder(run_dir: Path) -> int | None:
    """``None`` when no process holds ``run_dir``'s lock, else the holder's pid (0 when not known yet).
    Opens the lock file read-only and creates nothing, so probing a run never writes to it."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except PermissionError as error:
        raise RunUnreadable.from_error(error, run_dir) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else 0
        return None
    finally:
        os.close(fd)


def set_status_if_free(path: Path, state: RunState, error: str | None = None) -> bool:
    """Write ``status.json`` of a run no process holds (its job ended without writing it: killed, or
    failed before it could); ``False``, writing nothing, when another process holds the run."""
    if not Path(path).is_dir():
        return False
    try:
        acquire_lock(path)
    except RunBusy:
        return False
    try:
        atomic_write_json(Path(path) / STATUS_FILE, {"state": state, "updated": _now(), "error": error})
    finally:
        release_lock(path)
    return True


# --- metadata -----------------------------------------------------------------------------------
def _git(args: list[str], cwd: Path) -> str | None:
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


def collect_metadata(seeds: dict[str, int], code_dir: Path | None = None) -> dict[str, Any]:
    """Everything needed to know what ran where: code version, packages, interpreter, hardware, seeds."""
    code_dir = Path(code_dir or Path(__file__).resolve().parent.parent)
    commit = _git(["rev-parse", "HEAD"], code_dir)
    status = _git(["status", "--porcelain", "--untracked-files=no"], code_dir)
    packages = {}
    for name in RECORDED_PACKAGES:
        try:
            packages[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            packages[name] = None
    gpus = _gpu_models()
    return {
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "packages": packages,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": gpus[0] if gpus else None,
        "gpu_count": len(gpus),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "seeds": dict(seeds),
        "start_time": _now(),
        "argv": sys.argv,
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


# --- RNG state ----------------------------------------------------------------------------------
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


# --- appendable tables --------------------------------------------------------------------------
class CsvTable:
    """An append-only CSV table whose columns are fixed by its header.

    Each row is written with one ``write`` call, flushed and fsynced, so a crash loses at most the
    row being written (a torn last line without its newline), which readers drop.
    """

    def __init__(self, path: Path, columns: Iterable[str] | None = None) -> None:
        self.path = Path(path)
        self.default_columns: list[str] | None = list(columns) if columns is not None else None
        self.columns = self.default_columns
        if self.path.exists() and self.path.stat().st_size > 0:
            self._repair_torn_tail()
            with self.path.open(newline="") as f:
                header = next(csv.reader(f), None)
            if header:
                self.columns = header

    def _repair_torn_tail(self) -> None:
        """Cut a torn last line (``sound_length``) left by a crash, so appends start on a fresh line."""
        data = self.path.read_bytes()
        cut = sound_length(data)
        if cut < len(data):
            with self.path.open("r+b") as f:
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())

    def append(self, row: dict[str, Any]) -> None:
        self.append_many([row])

    def append_many(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        new_file = self.columns is None or not self.path.exists() or self.path.stat().st_size == 0
        if self.columns is None:
            self.columns = list(rows[0])
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        if new_file:
            writer.writeheader()
        for row in rows:
            unknown = set(row) - set(self.columns)
            if unknown:
                raise KeyError(
                    f"{self.path}: row has columns {sorted(unknown)} not in the table header; "
                    "every progress row must log the same keys"
                )
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())

    def truncate_after(self, column: str, max_value: float) -> int:
        """Drop rows whose ``column`` exceeds ``max_value`` (atomically); returns rows kept.

        A value that is not a number (a second header line a crashed writer left inside the table)
        is dropped with them. The rows kept keep their bytes: a table read back and written anew
        through pandas comes back formatted otherwise (floats with 15 significant digits instead of
        Python's shortest repr, a NaN logged as ``nan`` as an empty cell, an int of a column with
        NaNs as a float), so a resumed run's earlier rows would change (docs/results/run_integrity.md)."""
        if not self.path.exists():
            return 0
        table, _ = read_table(self.path)  # raises on a damaged table, as before any cut
        if table.empty:
            return 0
        values = pd.to_numeric(table[column], errors="coerce").to_numpy()
        keep = values <= max_value  # NaN compares False: dropped
        if keep.all():
            return len(table)
        data = self.path.read_bytes()
        lines = data[: sound_length(data)].splitlines(keepends=True)
        kept = [lines[0], *(line for line, k in zip(lines[1:], keep, strict=True) if k)]
        atomic_write_bytes(self.path, b"".join(kept))
        return int(keep.sum())

    def clear(self) -> int:
        """Remove the table (its header too: the next row starts it afresh); returns rows removed."""
        rows = 0
        if self.path.exists():
            rows = max(0, self.path.read_bytes().count(b"\n") - 1)  # lines after the header
            self.path.unlink()
        self.columns = self.default_columns
        return rows


def _csv_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return v.item()
    return v


def _fields(line: bytes) -> int:
    return len(next(csv.reader([line.decode(errors="replace")]), []))


def sound_length(data: bytes) -> int:
    """Bytes of a table's text ``data`` before a torn last line: one without its newline (a crash
    while appending it), or, after a header and with a newline, with fewer fields than the header
    (the start of a row whose rest was lost: a copy or file cut short). ``len(data)`` when whole."""
    if data and not data.endswith(b"\n"):
        return data.rfind(b"\n") + 1
    lines = data.splitlines(keepends=True)
    if len(lines) >= 2 and _fields(lines[-1].rstrip(b"\r\n")) < _fields(lines[0].rstrip(b"\r\n")):
        return len(data) - len(lines[-1])
    return len(data)


def read_table(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """Read a CSV table, tolerating a torn last line (``sound_length``); returns (table, problems
    found). Raises ``ValueError`` (pandas' ``ParserError`` among them) when a row inside the table
    has another number of fields than the header: the table is damaged, not torn."""
    path = Path(path)
    problems: list[str] = []
    if not path.exists():
        return pd.DataFrame(), [f"{path.name} missing"]
    data = path.read_bytes()
    cut = sound_length(data)
    if cut < len(data):
        data = data[:cut]
        problems.append(f"{path.name}: dropped a torn last line")
    if not data.strip():
        return pd.DataFrame(), problems
    lines = data.splitlines()
    width = _fields(lines[0])
    odd = next((i for i, line in enumerate(lines[1:], 2) if _fields(line) != width), None)
    if odd is not None:
        raise ValueError(f"line {odd} has {_fields(lines[odd - 1])} fields, the header {width}")
    table = pd.read_csv(io.BytesIO(data))  # raises pandas' ParserError on what else does not parse
    return table, problems


# --- the run directory --------------------------------------------------------------------------
def run_path(root: Path, experiment: str, arm: str, env: str, seed: int) -> Path:
    return Path(root) / experiment / arm / env / f"seed{int(seed)}"


class RunDir:
    """Writer side of one run directory. Build with ``RunDir.open``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.progress = CsvTable(self.path / PROGRESS_FILE)
        self.eval = CsvTable(self.path / EVAL_FILE, EVAL_COLUMNS)
        self._tb_writer = None
        self._closed = False
        self._latest_steps: int | None = None  # env steps of latest.pt, once saved or recovered here

    @classmethod
    def open(
        cls,
        path: Path,
        config: dict[str, Any],
        seeds: dict[str, int],
        resume: bool = True,
        effective_values: dict[str, dict[str, Any]] | None = None,
        extra_metadata: dict[str, Any] | None = None,
    ) -> RunDir:
        """Create (or, with ``resume``, reopen) a run directory for ``config``, holding its lock until
        ``close`` (``RunBusy`` when another process holds it; nothing is written then).

        ``effective_values`` (``declared_effective_values``'s form) goes into a new run's metadata.json
        under ``EFFECTIVE_VALUES_KEY``, so readers that import no Config class see what ran;
        ``extra_metadata`` adds its keys there too (a packed member records its pack).

        Reopening checks that the stored config equals ``config``: resuming a run under a different
        config would silently mix two experiments in one table.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        acquire_lock(path)
        try:
            config_file = path / CONFIG_FILE
            if config_file.exists():
                if not resume:
                    raise FileExistsError(f"{path}: run directory exists; pass resume=True to continue it")
                stored = json.loads(config_file.read_text())
                fresh = json.loads(json.dumps(config, default=_json_default))
                diff = _first_difference(stored, fresh)
                if diff is not None:
                    raise ValueError(f"{config_file}: cannot resume, config differs at {diff}")
            else:
                atomic_write_json(config_file, config)
            if not (path / METADATA_FILE).exists():
                metadata = collect_metadata(seeds)
                if effective_values is not None:
                    metadata[EFFECTIVE_VALUES_KEY] = effective_values
                metadata.update(extra_metadata or {})
                atomic_write_json(path / METADATA_FILE, metadata)
            run = cls(path)
            run.set_status("running")
        except BaseException:
            release_lock(path)
            raise
        return run

    # tables
    def append_progress(self, row: dict[str, Any]) -> None:
        self.progress.append(row)

    def append_eval(self, rows: list[dict[str, Any]]) -> None:
        self.eval.append_many(rows)

    def truncate_progress_after(self, env_steps: int, logged: bool = True, evaluated: bool = True) -> None:
        """On resume: drop rows logged after the checkpoint at ``env_steps``, which will be logged again.

        ``logged`` / ``evaluated``: whether the checkpoint was saved after its own step's progress row /
        evaluation; if not, rows at ``env_steps`` itself came after it (the last step's evaluation
        follows its checkpoint) and are dropped too."""
        self.progress.truncate_after("env_steps", env_steps if logged else env_steps - 1)
        self.eval.truncate_after("env_steps", env_steps if evaluated else env_steps - 1)

    # status
    def set_status(self, state: RunState, error: str | None = None) -> None:
        atomic_write_json(self.path / STATUS_FILE, {"state": state, "updated": _now(), "error": error})

    # checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_DIR / CHECKPOINT_FILE

    @property
    def previous_checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT_DIR / PREVIOUS_CHECKPOINT_FILE

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Write ``state`` as the new ``latest.pt`` once it is complete on disk and verified; the one it
        replaces stays as ``previous.pt``, unless both are at the same env steps (the last checkpoint
        of a run repeated at its end, or after a resume): ``previous.pt`` then keeps the older one, a
        point to go back to when the tables lack the latest one's rows (``recover``). A kill at any
        point leaves a loadable checkpoint (the new one, or the old one as latest or previous) and
        at most a temporary file ``recover`` removes."""
        import torch

        counters = state.get("counters")
        steps = counters.get("env_steps") if isinstance(counters, dict) else None

        buf = io.BytesIO()
        torch.save(state, buf)
        latest, previous = self.checkpoint_path, self.previous_checkpoint_path
        latest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=latest.parent, prefix=f".{latest.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getbuffer())
                f.flush()
                os.fsync(f.fileno())
            verify_checkpoint(Path(tmp))
            if latest.exists() and (steps is None or steps != self._latest_steps):
                os.replace(latest, previous)
            os.replace(tmp, latest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._latest_steps = steps
        _fsync_dir(latest.parent)

    def load_checkpoint(self) -> dict[str, Any] | None:
        """``latest.pt`` (``None`` when there is none); ``recover`` has made sure it loads."""
        if not self.checkpoint_path.exists():
            return None
        return _load_checkpoint(self.checkpoint_path)

    def recover(self) -> tuple[dict[str, Any] | None, str | None]:
        """Make the run agree with the newest checkpoint that loads, before the run writes anything.

        Removes temporary files a kill left; replaces a ``latest.pt`` that does not load by
        ``previous.pt`` (or drops both when neither loads); cuts ``progress.csv`` and ``eval.csv``
        back to the checkpoint's env steps, or empties them without a checkpoint. A checkpoint whose
        last logged row ``progress.csv`` lacks (``_missing_row``) is passed over like one that does
        not load. Returns the checkpoint and one line saying what was repaired (``None`` when nothing
        needed repair)."""
        for directory in (self.path, self.path / CHECKPOINT_DIR):
            for stale in directory.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
        latest, previous = self.checkpoint_path, self.previous_checkpoint_path
        checkpoint, why_not = None, []
        for candidate in (latest, previous):
            if not candidate.exists():
                continue
            try:
                checkpoint = _load_checkpoint(candidate)
                env_steps = int(checkpoint["counters"]["env_steps"])
            except Exception as error:  # any way a damaged file fails to load or to make sense
                checkpoint = None
                detail = " ".join(str(error).split())[:160]
                why_not.append(
                    f"{candidate.relative_to(self.path)} does not load ({type(error).__name__}: {detail})"
                )
                continue
            self.truncate_progress_after(env_steps)
            gap = self._missing_row(checkpoint)
            if gap is not None:
                checkpoint = None
                why_not.append(f"{PROGRESS_FILE} {gap} that {candidate.relative_to(self.path)} logged")
                continue
            if candidate != latest:
                if not why_not:  # killed between save_checkpoint's two renames
                    why_not.append(f"{latest.relative_to(self.path)} missing")
                os.replace(candidate, latest)
            self._latest_steps = env_steps
            break
        if checkpoint is None:
            latest.unlink(missing_ok=True)
            previous.unlink(missing_ok=True)
            dropped = self.progress.clear() + self.eval.clear()
            if why_not:
                return None, f"{'; '.join(why_not)}: starting afresh, progress.csv and eval.csv emptied"
            if dropped:
                return (
                    None,
                    f"no checkpoint: starting afresh, {dropped} table row(s) of an earlier start removed",
                )
            return None, None
        if why_not:
            return checkpoint, (
                f"{'; '.join(why_not)}: resuming from {PREVIOUS_CHECKPOINT_FILE} at {env_steps:,} env steps, "
                "tables cut back to it"
            )
        return checkpoint, None

    def _missing_row(self, checkpoint: dict[str, Any]) -> str | None:
        """How ``progress.csv`` (already cut back to ``checkpoint``) lacks the last row the run had
        logged when it saved ``checkpoint`` (its runner's ``last_log_steps``), or ``None`` when it has
        it (or the checkpoint does not say). A torn row a crash left, that the table's repair dropped,
        would otherwise leave a gap the resumed run never fills."""
        runner = checkpoint.get("runner")
        logged = runner.get("last_log_steps") if isinstance(runner, dict) else None
        if not isinstance(logged, int) or logged <= 0:
            return None
        table, _ = read_table(self.progress.path)
        steps = pd.to_numeric(table["env_steps"], errors="coerce") if "env_steps" in table else pd.Series()
        before = steps[steps <= logged]
        if len(before) and before.iloc[-1] == logged:
            return None
        end = f"ends at env_steps {before.iloc[-1]:,.0f}" if len(before) else "has no row"
        return f"{end} without the row at {logged:,} (torn or lost)"

    # tensorboard
    def tensorboard_writer(self) -> Any:
        if self._tb_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb_writer = SummaryWriter(log_dir=str(self.path / TENSORBOARD_DIR))
        return self._tb_writer

    def close(self) -> None:
        """Close the TensorBoard writer and release the run's lock (once per ``open``)."""
        if self._tb_writer is not None:
            self._tb_writer.close()
            self._tb_writer = None
        if not self._closed:
            self._closed = True
            release_lock(self.path)


def verify_checkpoint(path: Path) -> None:
    """Raise unless ``path`` is a complete checkpoint: a zip (``torch.save``'s format) whose members
    all match their CRCs, so a truncated or bit-flipped file is caught before it is trusted."""
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
    if bad is not None:
        raise ValueError(f"{path.name}: member {bad} fails its CRC check")


def _load_checkpoint(path: Path) -> dict[str, Any]:
    import torch

    verify_checkpoint(path)
    state = torch.load(path, weights_only=True, map_location="cpu")
    if not isinstance(state, dict):
        raise ValueError(f"{path.name}: expected a dict, got {type(state).__name__}")
    return state


def _fsync_dir(path: Path) -> None:
    """Make renames in ``path`` durable (POSIX: the directory entry is data of the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in a or key not in b:
                return f"'{name}' (present in only one)"
            found = _first_difference(a[key], b[key], name)
            if found is not None:
                return found
        return None
    return None if a == b else f"'{prefix}': stored {a!r}, now {b!r}"


# --- reader -------------------------------------------------------------------------------------
@dataclass
class RunData:
    """One run as read from disk. ``status`` is complete / incomplete / corrupt; ``problems`` says why."""

    path: Path
    config: dict[str, Any] | None
    metadata: dict[str, Any] | None
    progress: pd.DataFrame
    eval: pd.DataFrame
    state: str | None
    status: RunStatus
    problems: list[str] = field(default_factory=list)


def _read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` with the reason in ``problems`` when it is missing or
    damaged (not UTF-8, not JSON, not an object, not a file). ``RunUnreadable`` when not permitted."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        problems.append(f"{path.name} missing")
        return None
    except PermissionError as e:
        raise RunUnreadable.from_error(e, path) from None
    except (OSError, UnicodeDecodeError) as e:
        problems.append(f"{path.name} unreadable: {type(e).__name__}: {e}")
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        problems.append(f"{path.name} unreadable: {e}")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{path.name}: expected a JSON object, got {type(obj).__name__}")
        return None
    return obj


def read_status(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``status.json`` of the run at ``path`` as ``(object, None)``; ``(None, None)`` when there is none
    yet; ``(None, why)`` when it is damaged (the run counts as not finished: its next start rewrites it)."""
    problems: list[str] = []
    obj = _read_json(Path(path) / STATUS_FILE, problems)
    if obj is not None and not isinstance(obj.get("state"), str | None):
        return None, f"{STATUS_FILE}: 'state' is {obj['state']!r}, not a state"
    damaged = [p for p in problems if not p.endswith("missing")]
    return obj, damaged[0] if damaged else None


def read_run(path: Path) -> RunData:
    """Read a run directory without raising on damage (``RunUnreadable`` when it may not be read).

    * corrupt: config.json / metadata.json unreadable or missing, or a table that does not parse,
      whose rows are not numbers, or whose env steps repeat or go backwards;
    * complete: status.json says complete and everything parses (a torn last line is tolerated
      and listed in ``problems``; rerunning the plan repairs it: ``completion``);
    * incomplete: readable, but still running, failed or killed, or its status.json damaged.
    """
    path = Path(path)
    try:
        return _read_run(path)
    except PermissionError as error:
        raise RunUnreadable.from_error(error, path) from None


def _read_run(path: Path) -> RunData:
    problems: list[str] = []
    config = _read_json(path / CONFIG_FILE, problems)
    metadata = _read_json(path / METADATA_FILE, problems)
    status_obj, status_problem = read_status(path)
    if status_problem is not None or status_obj is None:
        problems.append(status_problem or f"{STATUS_FILE} missing")
    corrupt = config is None or metadata is None
    tables = {}
    for name in (PROGRESS_FILE, EVAL_FILE):
        try:
            table, table_problems = read_table(path / name)
        except PermissionError:
            raise
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as e:
            detail = (str(e).splitlines() or [type(e).__name__])[0]
            table, table_problems = pd.DataFrame(), [f"{name} does not parse: {detail}"]
            corrupt = True
        tables[name] = table
        problems.extend(p for p in table_problems if not p.endswith("missing") or name == PROGRESS_FILE)
    for problem in (_progress_order(tables[PROGRESS_FILE]), _eval_order(tables[EVAL_FILE])):
        if problem is not None:
            problems.append(problem)
            corrupt = True
    state = status_obj.get("state") if status_obj else None
    if corrupt:
        status: RunStatus = "corrupt"
    elif state == "complete" and not tables[PROGRESS_FILE].empty:
        status = "complete"
    else:
        status = "incomplete"
        if state == "failed" and status_obj and status_obj.get("error"):
            problems.append(f"failed: {status_obj['error']}")
    return RunData(path, config, metadata, tables[PROGRESS_FILE], tables[EVAL_FILE], state, status, problems)


def _env_steps(table: pd.DataFrame, name: str) -> tuple[pd.Series | None, str | None]:
    if table.empty or "env_steps" not in table:
        return None, None
    steps = pd.to_numeric(table["env_steps"], errors="coerce")
    if steps.isna().any():
        row = int(steps.isna().to_numpy().argmax()) + 2  # line in the file: header is line 1
        return None, f"{name} damaged: line {row} is not a row of numbers (a second header?)"
    return steps, None


def _not_numbers(table: pd.DataFrame, name: str) -> str | None:
    """Why ``table`` is damaged when a cell is neither a number nor empty (every column of both tables
    holds numbers: counters, returns, diagnostics), or ``None``."""
    for column in table.columns:
        if table[column].dtype != object:
            continue
        values = table[column]
        bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
        if bad.any():
            i = int(bad.to_numpy().argmax())
            return f"{name} damaged: {column} {values.iloc[i]!r} at line {i + 2} is not a number"
    return None


def _progress_order(table: pd.DataFrame) -> str | None:
    """Why ``progress.csv`` is damaged (cells that are not numbers, env steps that repeat or go
    backwards), or ``None``."""
    if not table.empty and "env_steps" not in table:
        return f"{PROGRESS_FILE} damaged: no env_steps column"
    steps, problem = _env_steps(table, PROGRESS_FILE)
    if steps is None:
        return problem
    if (problem := _not_numbers(table, PROGRESS_FILE)) is not None:
        return problem
    back = steps.diff().to_numpy()[1:] <= 0
    if back.any():
        i = int(back.argmax()) + 1
        return (
            f"{PROGRESS_FILE} damaged: env_steps {steps.iloc[i]:g} at line {i + 2} after "
            f"{steps.iloc[i - 1]:g} (rows repeat or go backwards: two writers, or a restart that did "
            "not cut the table)"
        )
    return None


def _eval_order(table: pd.DataFrame) -> str | None:
    """Why ``eval.csv`` is damaged (columns missing, cells that are not numbers, env steps going
    backwards, an evaluation's episode twice), or ``None``."""
    if lacking := [c for c in EVAL_COLUMNS if not table.empty and c not in table]:
        return f"{EVAL_FILE} damaged: no {', '.join(lacking)} column"
    steps, problem = _env_steps(table, EVAL_FILE)
    if steps is None:
        return problem
    if (problem := _not_numbers(table, EVAL_FILE)) is not None:
        return problem
    back = steps.diff().to_numpy()[1:] < 0
    if back.any():
        i = int(back.argmax()) + 1
        return f"{EVAL_FILE} damaged: env_steps {steps.iloc[i]:g} at line {i + 2} after {steps.iloc[i - 1]:g}"
    if "episode" not in table:
        return None
    repeated = table.assign(env_steps=steps).duplicated(["env_steps", "episode"]).to_numpy()
    if repeated.any():
        i = int(repeated.argmax())
        episode = table["episode"].iloc[i]
        return (
            f"{EVAL_FILE} damaged: the evaluation at env_steps {steps.iloc[i]:g} has episode {episode} twice"
        )
    return None


def find_runs(experiment_dir: Path) -> list[Path]:
    """Every run directory under ``experiment_dir`` (a directory named seed<k> with any run file).
    ``RunUnreadable`` names the first directory on the way that may not be read: an experiment that
    cannot be listed is not one without runs."""
    experiment_dir = Path(experiment_dir)

    def refuse(error: OSError) -> None:
        raise RunUnreadable.from_error(error, experiment_dir)

    found = []
    for top, dirs, _ in os.walk(experiment_dir, onerror=refuse):
        for name in dirs:
            p = Path(top, name)
            if not (name.startswith("seed") and name[4:].isdigit()):
                continue
            try:
                if any((p / f).exists() for f in (CONFIG_FILE, STATUS_FILE)):
                    found.append(p)
            except PermissionError as error:
                raise RunUnreadable.from_error(error, p) from None
    return sorted(found)


def completion(path: Path, steps: int | None = None) -> tuple[bool, str | None]:
    """Whether the run at ``path`` is finished, cheaply (``status.json`` and the tail of
    ``progress.csv``), and, when it looks finished or damaged but is not, why (one phrase): a
    damaged ``status.json``; complete, but the last progress row torn or missing, or (with ``steps``,
    the run's env-step budget) the rows ending short of it. ``RunUnreadable`` when not permitted."""
    status, damaged = read_status(path)
    if damaged is not None:
        return False, f"{damaged}: running it again"
    if status is None:
        return False, None
    complete = status.get("state") == "complete"
    said = f"{STATUS_FILE} says complete but " if complete else ""
    progress = Path(path) / PROGRESS_FILE
    try:
        with open(progress, "rb") as f:
            header = f.readline()
            size = f.seek(0, os.SEEK_END)
            f.seek(max(len(header), size - 65536))
            tail = f.read()
    except FileNotFoundError:
        return False, f"{said}{PROGRESS_FILE} is missing: running it again" if complete else None
    except PermissionError as error:
        raise RunUnreadable.from_error(error, progress) from None
    whole = tail[: sound_length(header + tail) - len(header)] if tail else tail
    if len(whole) < len(tail):
        return False, f"{said}the last row of {PROGRESS_FILE} is torn: repairing it"
    if not complete:
        return False, None
    rows = [line for line in whole.split(b"\n") if line.strip()]
    if not rows:
        return False, f"{said}{PROGRESS_FILE} has no rows: running it again"
    if steps is not None:
        columns = header.decode(errors="replace").strip().split(",")
        values = rows[-1].decode(errors="replace").split(",")
        try:
            last = int(float(dict(zip(columns, values))["env_steps"]))
        except (KeyError, ValueError):
            last = 0
        if last < steps:
            return False, (
                f"{STATUS_FILE} says complete but {PROGRESS_FILE} ends at {last:,} of {steps:,} env steps: "
                "repairing it"
            )
    return True, None


def is_complete(path: Path, steps: int | None = None) -> bool:
    """``completion``'s verdict: used to skip finished runs."""
    return completion(path, steps)[0]
