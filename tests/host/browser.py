"""Headless chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: commands on the browser's fd 3, answers and events
on its fd 4, each message JSON ended by a NUL byte): no port, no extra
package. Enough to load a page and look at it: what it logged, what it
requested, what it says, and a screenshot."""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = "/usr/bin/chromium"


class BrowserError(Exception):
    """The browser answered a command with an error, or not in time."""


class Browser:
    """One headless chromium with one page attached (`page` commands go to it)."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child, before exec
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        argv = [CHROMIUM, "--headless", "--remote-debugging-pipe", "--user-data-dir=" +
                str(profile), "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions", "--hide-scrollbars",
                "--mute-audio", f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:  # chromium's sandbox refuses root
            argv.insert(1, "--no-sandbox")
        self.proc = subprocess.Popen(argv, preexec_fn=fds_3_and_4, pass_fds=(3, 4),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Closes the browser (kills it if it does not go)."""
        if self.proc.poll() is None:
            try:
                self.call("Browser.close", timeout=5)
            except (BrowserError, OSError):
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to_child = self._from_child = -1

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise BrowserError("no answer from chromium in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed its pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None, page: bool = False,
             timeout: float = 20.0) -> dict[str, Any]:
        """Sends a command (to the page's session when page) and returns its
        result; the events that arrive meanwhile go to `events`."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self._to_child, data):]
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            if "method" in answer:
                self.events.append(answer)

    def page(self, method: str, params: dict[str, Any] | None = None,
             timeout: float = 20.0) -> dict[str, Any]:
        """A command to the page."""
        return self.call(method, params, page=True, timeout=timeout)

    def wait_event(self, method: str, timeout: float = 20.0) -> dict[str, Any]:
        """The first event `method` of the page (already received or next)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for ev in self.events[seen:]:
                if ev["method"] == method:
                    return ev
            seen = len(self.events)
            msg = self._read_message(deadline)
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str, timeout: float = 20.0) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page, as tall as it is, into a PNG file."""
        metrics = self.page("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.page("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                    "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))
