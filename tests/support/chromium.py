"""A real headless Chromium for tests: open a page, gather what its console says, take a
screenshot.

The browser is Debian's ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs
it where it can), found on PATH; without it the tests that need it skip and say why. It
is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: the browser
reads commands on its file descriptor 3 and writes answers and events on 4, each a JSON
text ended by a NUL byte), so no driver, network port or extra package is needed.
"""

from __future__ import annotations

import base64
import contextlib
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

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_S = 60.0


def browser() -> str | None:
    """The Chromium program on PATH, or None."""
    return next((found for name in NAMES if (found := shutil.which(name))), None)


def why_not() -> str | None:
    """Why no browser can run here (None: it can)."""
    if browser() is None:
        return (f"no Chromium on PATH ({', '.join(NAMES)}); install Debian's chromium "
                "package")
    return None


@dataclass
class Visit:
    """What a page did when loaded: its console's errors (console.error, uncaught
    exceptions, the browser's own error entries such as a failed load), every console
    message, the screenshot (PNG bytes) and values read in the page."""

    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    values: dict = field(default_factory=dict)


class _Pipe:
    """The DevTools protocol over the browser's pipe: commands by id, events queued."""

    def __init__(self, to_browser: int, from_browser: int):
        self._out = os.fdopen(to_browser, "wb", buffering=0)
        self._in = os.fdopen(from_browser, "rb", buffering=0)
        self._next = 0
        self._answers: dict[int, dict] = {}
        self.events: queue.Queue[dict] = queue.Queue()
        self._ready = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := self._in.read(65536):
            buffer += chunk
            while b"\0" in buffer:
                text, buffer = buffer.split(b"\0", 1)
                message = json.loads(text)
                if "id" in message:
                    with self._ready:
                        self._answers[message["id"]] = message
                        self._ready.notify_all()
                else:
                    self.events.put(message)
        with self._ready:
            self._answers[-1] = {"error": "the browser closed its pipe"}
            self._ready.notify_all()

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        ask = {"id": self._next, "method": method, "params": params or {}}
        if session:
            ask["sessionId"] = session
        self._out.write(json.dumps(ask).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        with self._ready:
            while self._next not in self._answers and -1 not in self._answers:
                if not self._ready.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no answer to {method} in {TIMEOUT_S:.0f} s")
            answer = self._answers.pop(self._next, None) or self._answers[-1]
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]


def visit(url: str, width: int = 1100, height: int = 1600, settle_s: float = 0.5,
          evaluate: dict[str, str] | None = None) -> Visit:
    """Load ``url`` in a new headless Chromium, wait for its load event and ``settle_s``
    more, and return its console errors, messages, a screenshot of the ``width`` x
    ``height`` viewport, and ``evaluate``'s expressions (name: JavaScript) as values."""
    program = browser()
    if program is None:
        raise RuntimeError(why_not())
    profile = tempfile.mkdtemp(prefix="xsweep-chromium-")
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()
    # numbered past 4, so that putting one at 3 or 4 in the child cannot clobber the other
    to_browser_r, from_browser_w = (_above_four(fd) for fd in (to_browser_r, from_browser_w))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
             "--hide-scrollbars", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"]
    # a small trampoline puts the pipes where the browser expects them, 3 (commands) and 4
    # (answers), then becomes the browser (a POSIX shell takes only one-digit numbers)
    process = subprocess.Popen(
        [sys.executable, "-c", _TRAMPOLINE, str(to_browser_r), str(from_browser_w), program,
         *flags], pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = _Pipe(to_browser_w, from_browser_r)
    out = Visit()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            pipe.call(domain, session=session)
        pipe.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session)
        pipe.call("Page.navigate", {"url": url}, session=session)
        loaded, deadline = False, time.monotonic() + TIMEOUT_S
        settled = None
        while settled is None or time.monotonic() < settled:
            wait = (settled if settled is not None else deadline) - time.monotonic()
            try:
                event = pipe.events.get(timeout=max(0.01, wait))
            except queue.Empty:
                if not loaded:
                    raise TimeoutError(f"{url} did not load in {TIMEOUT_S:.0f} s") from None
                continue
            if event.get("sessionId") != session:
                continue
            loaded = loaded or _note(event, out)
            if loaded and settled is None:
                settled = time.monotonic() + settle_s
        for name, expression in (evaluate or {}).items():
            answer = pipe.call("Runtime.evaluate", {"expression": expression,
                                                    "returnByValue": True}, session=session)
            out.values[name] = answer["result"].get("value")
        shot = pipe.call("Page.captureScreenshot", {"format": "png"}, session=session)
        out.screenshot = base64.b64decode(shot["data"])
        while not pipe.events.empty():  # anything said while the values were read
            event = pipe.events.get()
            if event.get("sessionId") == session:
                _note(event, out)
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            pipe.call("Browser.close")
    finally:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return out


_TRAMPOLINE = """
import os, sys
commands, answers = int(sys.argv[1]), int(sys.argv[2])
os.dup2(commands, 3)
os.dup2(answers, 4)
os.close(commands)
os.close(answers)
os.execv(sys.argv[3], sys.argv[3:])
"""


def _above_four(fd: int) -> int:
    """``fd`` moved to a descriptor numbered 10 or more (``fd`` closed)."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


def _note(event: dict, out: Visit) -> bool:
    """Record what ``event`` says in ``out``; True for the page's load event."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
        out.messages.append(f"{params['type']}: {text}")
        if params["type"] in ("error", "assert"):
            out.errors.append(f"console.{params['type']}: {text}")
    elif method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        out.errors.append("uncaught: " + details.get("exception", {}).get(
            "description", details.get("text", "")))
    elif method == "Log.entryAdded":
        entry = params["entry"]
        out.messages.append(f"{entry['level']}: {entry['text']}")
        if entry["level"] == "error":
            out.errors.append(f"{entry['source']}: {entry['text']} {entry.get('url', '')}")
    return method == "Page.loadEventFired"


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
