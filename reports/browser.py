"""Check a report in a real headless browser: Debian's chromium driven over the DevTools protocol.

Chromium's ``--remote-debugging-pipe`` speaks the DevTools protocol (JSON messages ended by a NUL
byte) on file descriptors 3 (commands in) and 4 (replies and events out), so no websocket client or
browser-automation package is needed. ``check_page`` loads a file, collects console messages,
uncaught exceptions and failed loads, measures every ``<img>`` and counts every table's body rows,
and optionally saves a full-page screenshot.

``python -m reports.browser page.html [--screenshot out.png]`` prints the findings and exits 1 on
a console error, an uncaught exception or an image that did not render.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.rundir import NotARegularFile, atomic_write_bytes, check_output

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Headless, isolated, offline: nothing in the page may need the network, and the browser itself must
# not phone home (update checks, sync, QUIC probes) during a test.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe",
)  # fmt: skip
PAGE_PROBE = """(() => ({
  images: Array.from(document.images).map(img => ({
    id: img.id, complete: img.complete, naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight,
    width: img.getBoundingClientRect().width, height: img.getBoundingClientRect().height})),
  tables: Object.fromEntries(Array.from(document.querySelectorAll("table[id]")).map(t =>
    [t.id, t.querySelectorAll("tbody tr:not(.empty)").length])),
  sections: Array.from(document.querySelectorAll("section[id]")).map(s => s.id),
  clipped: Array.from(document.querySelectorAll(".table-wrap")).filter(w => w.scrollWidth > w.clientWidth)
    .map(w => w.querySelector("table").id),
  height: document.documentElement.scrollHeight,
  scrollWidth: document.documentElement.scrollWidth,
  clientWidth: document.documentElement.clientWidth,
}))()"""


# A frame is painted once two requestAnimationFrame callbacks have run.
TWO_FRAMES = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
# Chromium's largest texture side: a taller capture comes back blank or fails (puppeteer#4500).
MAX_SHOT_HEIGHT = 16384
SHOT_ATTEMPTS = 3


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    """What the browser saw: console messages and exceptions (``errors``), per-image sizes, body-row
    counts per table id, section ids, the page's scrollable and visible widths (px), and the ids of
    the tables wider than their box (``clipped``: the page hides their right part until the reader
    scrolls the box sideways)."""

    errors: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, int] = field(default_factory=dict)
    sections: list[str] = field(default_factory=list)
    scroll_width: int = 0
    client_width: int = 0
    clipped: list[str] = field(default_factory=list)

    @property
    def scrolls_sideways(self) -> bool:
        return self.scroll_width > self.client_width

    @property
    def broken_images(self) -> list[str]:
        return [
            img["id"] or "(no id)"
            for img in self.images
            if not img["complete"]
            or min(img["naturalWidth"], img["naturalHeight"], img["width"], img["height"]) <= 0
        ]


class _DevTools:
    """A minimal DevTools-protocol client over chromium's debugging pipe."""

    def __init__(self, chromium: str, user_data_dir: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium expects the pipe on fds 3 and 4; bash moves them there before exec (dash cannot
        # redirect fds above 9). The child's ends are first moved above 9 so that the redirections
        # cannot overwrite one another.
        to_chrome_r, from_chrome_w = (_above_9(fd) for fd in (to_chrome_r, from_chrome_w))
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        self.process = subprocess.Popen(
            ["/bin/bash", "-c", script, chromium, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_chrome, 1 << 16):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in messages:
                self._messages.put(json.loads(message))
        self._messages.put(None)

    def _next(self, deadline: float) -> dict[str, Any]:
        try:
            message = self._messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError("chromium did not answer in time") from None
        if message is None:
            raise RuntimeError(f"chromium closed the DevTools pipe (exit code {self.process.poll()})")
        return message

    def call(
        self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0
    ) -> dict:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        os.write(self._to_chrome, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._next(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})
            self.events.append(message)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            message = self._next(deadline)
            self.events.append(message)
            if message.get("method") == method:
                return message

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5.0)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def _above_9(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


def _errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(
                "exception: " + str(details.get("exception", {}).get("description", details.get("text")))
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip())
    return errors


def _capture(devtools: _DevTools, session: str, width: int, height: int, timeout: float) -> bytes:
    """A PNG of the whole page. The viewport is first grown to the page's height and two animation
    frames are awaited so that the compositor holds a frame of it: a capture beyond a viewport with no
    fresh frame fails now and then with "Unable to capture screenshot" (chromedp#1125, seen in our CI
    under load), so a failed capture waits for new frames and tries again."""
    height = min(height, MAX_SHOT_HEIGHT)
    devtools.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
    for attempt in range(1, SHOT_ATTEMPTS + 1):
        devtools.call("Runtime.evaluate", {"expression": TWO_FRAMES, "awaitPromise": True}, session=session)
        try:
            shot = devtools.call(
                "Page.captureScreenshot", {"format": "png", "clip": clip}, session=session, timeout=timeout
            )
        except RuntimeError:
            if attempt == SHOT_ATTEMPTS:
                raise
            time.sleep(0.5 * attempt)
        else:
            return base64.b64decode(shot["data"])


def check_page(
    page: Path, screenshot: Path | None = None, width: int = 1280, timeout: float = 60.0
) -> PageCheck:
    """Load ``page`` in headless chromium and report what it saw (see ``PageCheck``)."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError(f"no chromium found on PATH (looked for {', '.join(CHROMIUM_NAMES)})")
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        devtools = _DevTools(chromium, profile)
        try:
            target = devtools.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)
            session = devtools.call(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
            )["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                devtools.call(f"{domain}.enable", session=session)
            devtools.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            devtools.call("Page.navigate", {"url": Path(page).resolve().as_uri()}, session=session)
            devtools.wait_event("Page.loadEventFired", timeout=timeout)
            probe = devtools.call(
                "Runtime.evaluate", {"expression": PAGE_PROBE, "returnByValue": True}, session=session
            )["result"]["value"]
            if screenshot is not None:
                shot = _capture(devtools, session, width, probe["height"], timeout)
                atomic_write_bytes(Path(screenshot), shot)
        finally:
            devtools.close()
    return PageCheck(
        _errors(devtools.events), probe["images"], probe["tables"], probe["sections"],
        probe["scrollWidth"], probe["clientWidth"], probe["clipped"],
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.browser", description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.screenshot is not None:
        try:
            check_output(args.screenshot)
        except NotARegularFile as e:
            print(f"error: --screenshot: {e}", file=sys.stderr)
            return 2
    check = check_page(args.page, args.screenshot)
    print(f"sections: {', '.join(check.sections)}")
    print(f"images: {len(check.images)} ({len(check.broken_images)} not rendered: {check.broken_images})")
    print("table rows: " + ", ".join(f"{k}={v}" for k, v in check.tables.items()))
    print(f"width: {check.scroll_width} px of {check.client_width} px visible")
    print(f"tables wider than the page (scroll in their box): {', '.join(check.clipped) or 'none'}")
    for error in check.errors:
        print(error)
    return 1 if check.errors or check.broken_images else 0


if __name__ == "__main__":
    sys.exit(main())
