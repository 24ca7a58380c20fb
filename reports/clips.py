"""The report's "Watch the agents" section: one short clip per arm, an animated GIF of one evaluation
episode played from the final checkpoint of the arm's first complete run that kept one.

The clip is made by ``python -m repro evaluate RUN --episodes 1 --video DIR`` in a child process:
playing an agent needs the training core, which the reports layer never imports (pyproject's import
contract), as ``repro`` runs ``reports`` the other way. The GIF is embedded as a data URI, so the page
stays self-contained. An arm none of whose runs kept a checkpoint (the committed study runs keep
none) is named in a note; an experiment where no arm has one gets no section.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from pathlib import Path

from algorithms.rundir import CHECKPOINT_DIR, CHECKPOINT_FILE
from analysis.runs import Experiment
from reports.page import URI_SUFFIXES, Figure, Section

GIF_URI = URI_SUFFIXES[1][0]
# Frames per clip: about 10 s at the evaluate command's 50 ms a frame, a few hundred kB on the page.
CLIP_FRAMES = 200
CLIP_TIMEOUT_S = 600


def _run_with_checkpoint(exp: Experiment, arm: str) -> tuple[str, int, Path] | None:
    """``(env, seed, path)`` of the arm's first complete run, by env and seed, with a final checkpoint."""
    runs = exp.runs[(exp.runs.arm == arm) & (exp.runs.status == "complete")].sort_values(["env", "seed"])
    for row in runs.itertuples():
        if (Path(row.path) / CHECKPOINT_DIR / CHECKPOINT_FILE).is_file():
            return row.env, int(row.seed), Path(row.path)
    return None


def _clip(arm: str, env: str, seed: int, run: Path) -> Figure | str:
    """The clip of ``run`` as a figure, or the one line that says why there is none."""
    with tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, "-m", "repro", "evaluate", str(run), "--episodes", "1"]
        argv += ["--video", out, "--max-frames", str(CLIP_FRAMES)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=CLIP_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return f"{arm}: no clip (its episode ran past {CLIP_TIMEOUT_S} s)"
        gif = Path(out) / "episode0.gif"
        if done.returncode != 0 or not gif.is_file():
            why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            return f"{arm}: no clip ({why})"
        uri = GIF_URI + base64.b64encode(gif.read_bytes()).decode("ascii")
    returned = next((line.split("return ")[1].split(",")[0] for line in done.stdout.splitlines()
                     if line.startswith("episode 0: return ")), "?")  # fmt: skip
    caption = (
        f"{arm} on {env}, seed {seed}: one evaluation episode from its final checkpoint (return {returned}; "
        f"the first {CLIP_FRAMES} frames at most). Replay it: rlrepro evaluate {run} --video DIR"
    )
    return Figure(f"clip-{arm}", uri, f"{arm} playing {env}", caption)


def _peer_arms(plan: dict | None) -> set[str]:
    """The arms the plan record names as run by another program (``repro.record``): their checkpoints
    are that program's, not a run this harness can play."""
    entries = [p for p in (plan or {}).get("plans", []) if isinstance(p, dict)]
    return {str(arm) for p in entries for arm in p.get("peers", [])}


def clips_section(exp: Experiment) -> Section | None:
    """One clip per arm where a run kept its final checkpoint; None where no arm's run did."""
    figures, notes = [], []
    peers = _peer_arms(exp.plan)
    for arm in exp.arms:
        if arm in peers:
            notes.append(f"{arm}: a peer arm, run by another program, so no clip (its checkpoints are not "
                         "this harness's)")  # fmt: skip
            continue
        found = _run_with_checkpoint(exp, arm)
        if found is None:
            notes.append(f"{arm}: no complete run kept a checkpoint, so no clip")
            continue
        clip = _clip(arm, *found)
        if isinstance(clip, Figure):
            figures.append(clip)
        else:
            notes.append(clip)
    if not figures and all("kept a checkpoint" in n or "peer arm" in n for n in notes):
        return None
    intro = "One evaluation episode per arm, played by the agent of its final checkpoint (rlrepro evaluate)."
    return Section("watch", "Watch the agents", intro=intro, figures=figures, notes=notes)
