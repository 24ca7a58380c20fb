"""The writer side of one run directory (``RunDir``): opening it under its lock, its tables and
status, checkpoints written, verified and rotated, and the recovery every start runs. torch is
imported inside the checkpoint functions only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import zipfile
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from algorithms.rundir import layout
from algorithms.rundir.atomic import _fsync_dir, _json_default, _now, atomic_write_json, temporary_beside
from algorithms.rundir.lock import acquire_lock, release_lock
from algorithms.rundir.meta import collect_metadata, start_record
from algorithms.rundir.reader import log_interval
from algorithms.rundir.tables import CsvTable, read_table, schedule_gap

# The checkpoint's key naming the run it belongs to: the SHA-256 of the run's config.json (written
# once, at the run's start). A checkpoint copied in from another run (another seed) is refused.
RUN_IDENTITY_KEY = "run_config_sha256"


class RunDir:
    """Writer side of one run directory. Build with ``RunDir.open``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.progress = CsvTable(self.path / layout.PROGRESS_FILE)
        self.eval = CsvTable(self.path / layout.EVAL_FILE, layout.EVAL_COLUMNS)
        self._tb_writer = None
        self._closed = False
        self._latest_steps: int | None = None  # env steps of latest.pt, once saved or recovered here
        self.reopened = False  # metadata.json was there: this start continues an earlier one

    @classmethod
    def open(
        cls,
        path: Path,
        config: dict[str, Any],
        seeds: dict[str, int],
        resume: bool = True,
        effective_values: dict[str, dict[str, Any]] | None = None,
        extra_metadata: dict[str, Any] | None = None,
        read_stored: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        ignore: Collection[str] = (),
    ) -> RunDir:
        """Create (or, with ``resume``, reopen) a run directory for ``config``, holding its lock until
        ``close`` (``RunBusy`` when another process holds it; nothing is written then).

        ``effective_values`` (``declared_effective_values``'s form) goes into a new run's metadata.json
        under ``layout.EFFECTIVE_VALUES_KEY``, so readers that import no Config class see what ran;
        ``extra_metadata`` adds its keys there too (a packed member records its pack).

        Reopening checks that the stored config equals ``config``: resuming a run under a different
        config would silently mix two experiments in one table. ``read_stored`` turns the stored
        config into today's form first (renamed keys, fields added since with their defaults); the
        file itself is left as it was written. ``ignore`` names keys (dotted: ``runner.tensorboard``)
        that may differ: options that do not change what the run computes.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        acquire_lock(path)
        try:
            config_file = path / layout.CONFIG_FILE
            if config_file.exists():
                if not resume:
                    raise FileExistsError(f"{path}: run directory exists; pass resume=True to continue it")
                stored = json.loads(layout.read_regular(config_file))
                fresh = json.loads(json.dumps(config, default=_json_default))
                if read_stored is not None:
                    stored = json.loads(json.dumps(read_stored(stored), default=_json_default))
                diff = next(config_differences(stored, fresh, ignore), None)
                if diff is not None:
                    raise ValueError(f"{config_file}: cannot resume, config differs at {diff}")
            else:
                atomic_write_json(config_file, config)
            reopened = (path / layout.METADATA_FILE).exists()
            if not reopened:
                metadata = collect_metadata(seeds)
                if effective_values is not None:
                    metadata[layout.EFFECTIVE_VALUES_KEY] = effective_values
                metadata.update(extra_metadata or {})
                atomic_write_json(path / layout.METADATA_FILE, metadata)
            run = cls(path)
            run.reopened = reopened
            run.set_status("running")
        except BaseException:
            release_lock(path)
            raise
        return run

    def note_resume(self, env_steps: int, **extra: Any) -> dict[str, Any]:
        """Add this start, which continues the run from ``env_steps`` (0: afresh, no checkpoint), to
        metadata.json's ``layout.RESUMES_KEY`` list: its time, code, host and command
        (``start_record``) and ``extra``; the first start's record stays as it was. Returns the entry.
        ``ValueError`` (one line) when metadata.json is not a JSON object: the run's own record of
        where it ran is damaged, and resuming would leave it so."""
        file = self.path / layout.METADATA_FILE
        try:
            metadata = json.loads(layout.read_regular(file))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{file}: unreadable ({error}): move it aside to resume the run") from None
        if not isinstance(metadata, dict):
            raise ValueError(f"{file}: not a JSON object: move it aside to resume the run")
        entry = {"time": _now(), "env_steps": int(env_steps), **start_record(), **extra}
        metadata[layout.RESUMES_KEY] = [*metadata.get(layout.RESUMES_KEY, []), entry]
        atomic_write_json(file, metadata)
        return entry

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
    def set_status(self, state: layout.RunState, error: str | None = None) -> None:
        atomic_write_json(self.path / layout.STATUS_FILE, {"state": state, "updated": _now(), "error": error})

    # checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.path / layout.CHECKPOINT_DIR / layout.CHECKPOINT_FILE

    @property
    def previous_checkpoint_path(self) -> Path:
        return self.path / layout.CHECKPOINT_DIR / layout.PREVIOUS_CHECKPOINT_FILE

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Write ``state`` as the new ``latest.pt`` once it is complete on disk and verified; the one it
        replaces stays as ``previous.pt``, unless both are at the same env steps (the last checkpoint
        of a run repeated at its end, or after a resume): ``previous.pt`` then keeps the older one, a
        point to go back to when the tables lack the latest one's rows (``recover``). A kill at any
        point leaves a loadable checkpoint (the new one, or the old one as latest or previous) and
        at most a temporary file ``recover`` removes. ``latest.pt`` is never absent once written: a
        reader between the two steps (the Ray driver's mirror, ``repro/mirror.py``) would otherwise
        see it deleted."""
        import torch

        counters = state.get("counters")
        steps = counters.get("env_steps") if isinstance(counters, dict) else None
        if (identity := self._identity()) is not None:
            state = {**state, RUN_IDENTITY_KEY: identity}

        buf = io.BytesIO()
        torch.save(state, buf)
        latest, previous = self.checkpoint_path, self.previous_checkpoint_path
        latest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temporary_beside(latest)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getbuffer())
                f.flush()
                os.fsync(f.fileno())
            verify_checkpoint(Path(tmp))
            if latest.exists() and (steps is None or steps != self._latest_steps):
                _keep_as(latest, previous)
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
        checkpoint = _load_checkpoint(self.checkpoint_path)
        checkpoint.pop(RUN_IDENTITY_KEY, None)  # the run's own (``recover`` checked it), not its state
        return checkpoint

    def recover(self) -> tuple[dict[str, Any] | None, str | None]:
        """Make the run agree with the newest checkpoint that loads, before the run writes anything.

        Removes temporary files a kill left; replaces a ``latest.pt`` that does not load by
        ``previous.pt`` (or drops both when neither loads); cuts ``progress.csv`` and ``eval.csv``
        back to the checkpoint's env steps, or empties them without a checkpoint. A checkpoint whose
        last logged row ``progress.csv`` lacks (``_missing_row``) is passed over like one that does
        not load. Returns the checkpoint and one line saying what was repaired (``None`` when nothing
        needed repair)."""
        for directory in (self.path, self.path / layout.CHECKPOINT_DIR):
            for stale in directory.glob(".*.tmp"):
                stale.unlink(missing_ok=True)
        latest, previous = self.checkpoint_path, self.previous_checkpoint_path
        checkpoint, why_not = None, []
        for candidate in (latest, previous):
            if not candidate.exists():
                continue
            try:
                checkpoint = _load_checkpoint(candidate)
                owner = checkpoint.pop(RUN_IDENTITY_KEY, None)
                if owner is not None and owner != self._identity():  # older checkpoints carry none
                    raise ValueError("another run's checkpoint (saved beside another config.json)")
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
                why_not.append(f"{layout.PROGRESS_FILE} {gap} that {candidate.relative_to(self.path)} logged")
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
                f"{'; '.join(why_not)}: resuming from {layout.PREVIOUS_CHECKPOINT_FILE} at "
                f"{env_steps:,} env steps, tables cut back to it"
            )
        return checkpoint, None

    def _identity(self) -> str | None:
        """``RUN_IDENTITY_KEY``'s value for this run (``None`` before its config.json exists): the
        SHA-256 of its config.json without the budget (``runner.n_steps``), canonically ordered. What
        a run trains (algorithm, env, seed, every setting) is its identity; how far it trains is not,
        since a run stopped part-way is the same run, and a changed budget is refused before any job
        starts (``repro.changed``)."""
        try:
            config = json.loads(layout.read_regular(self.path / layout.CONFIG_FILE))
        except FileNotFoundError:
            return None
        if isinstance(config.get("runner"), dict):
            config["runner"] = {k: v for k, v in config["runner"].items() if k != "n_steps"}
        return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()

    def _missing_row(self, checkpoint: dict[str, Any]) -> str | None:
        """How ``progress.csv`` (already cut back to ``checkpoint``) lacks a row the run had logged
        when it saved ``checkpoint``: its last (its runner's ``last_log_steps``), or one of the
        schedule before it (``schedule_gap``, every ``runner.log_interval_steps`` of config.json);
        ``None`` when it has them (or the checkpoint and config do not say). A torn row a crash left,
        that the table's repair dropped, or a row lost from the middle would otherwise leave a gap
        the resumed run never fills."""
        table, _ = read_table(self.progress.path)
        steps = pd.to_numeric(table["env_steps"], errors="coerce") if "env_steps" in table else pd.Series()
        runner = checkpoint.get("runner")
        logged = runner.get("last_log_steps") if isinstance(runner, dict) else None
        if isinstance(logged, int) and logged > 0:
            before = steps[steps <= logged]
            if not len(before) or before.iloc[-1] != logged:
                end = f"ends at env_steps {before.iloc[-1]:,.0f}" if len(before) else "has no row"
                return f"{end} without the row at {logged:,} (torn or lost)"
        interval = log_interval(json.loads(layout.read_regular(self.path / layout.CONFIG_FILE)))
        if interval is None or "sampler_itrs" not in table:
            return None
        itrs = pd.to_numeric(table["sampler_itrs"], errors="coerce")
        return schedule_gap(steps.tolist(), itrs.tolist(), interval)

    # tensorboard
    def tensorboard_writer(self) -> Any:
        if self._tb_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb_writer = SummaryWriter(log_dir=str(self.path / layout.TENSORBOARD_DIR))
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


def config_differences(a: Any, b: Any, ignore: Collection[str] = (), prefix: str = "") -> Iterator[str]:
    """Each key (dotted, with both values) at which the configs ``a`` and ``b`` differ, in sorted key
    order, but for the keys in ``ignore``."""
    if prefix in ignore:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            name = f"{prefix}.{key}" if prefix else str(key)
            if name in ignore:
                continue
            if key not in a or key not in b:
                yield f"'{name}' (present in only one)"
            else:
                yield from config_differences(a[key], b[key], ignore, name)
    elif a != b:
        yield f"'{prefix}': stored {a!r}, now {b!r}"


def _keep_as(source: Path, target: Path) -> None:
    """Make ``target`` a copy of ``source`` without ever removing ``source``: a hard link (or, where
    the file system has none, a copy) under a temporary name, then renamed over ``target``. When
    ``target`` already is ``source`` (a kill came between the link and the new ``latest.pt``), there
    is nothing to do: a rename onto another link of the same file would leave the temporary name."""
    if target.exists() and os.path.samefile(source, target):
        return
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    try:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
