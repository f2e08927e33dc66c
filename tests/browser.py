"""Open an HTML file in headless Chromium and report what a reader would see go wrong: images
that did not load and console errors. Talks the Chrome DevTools Protocol over a websocket
(websocket-client); Chromium comes from Debian (`make browser`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageCheck:
    images: list[dict[str, Any]] = field(default_factory=list)  # src prefix, complete, naturalWidth
    console_errors: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def broken_images(self) -> list[dict[str, Any]]:
        return [i for i in self.images if not i["complete"] or i["naturalWidth"] <= 0]


class _Cdp:
    def __init__(self, url: str) -> None:
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = json.loads(self.ws.recv())
            if ev.get("method") == method:
                return ev
            self.events.append(ev)
        raise TimeoutError(f"no {method} within {timeout} s")


def check_page(html_file: Path, timeout: float = 60) -> PageCheck:
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("Chromium is not installed; `make browser` installs it")
    profile = tempfile.mkdtemp(prefix="tiersim-chromium-")
    proc = subprocess.Popen(
        [
            exe,
            "--headless=new",
            "--no-sandbox",  # the test may run as root, where Chromium refuses its sandbox
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ws_url = None
        deadline = time.monotonic() + timeout
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
                break
        if ws_url is None:
            raise RuntimeError(f"Chromium did not start (exit status {proc.poll()})")
        cdp = _Cdp(ws_url)
        target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
        session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            cdp.call(f"{domain}.enable", session)
        cdp.call("Page.navigate", session, url=html_file.resolve().as_uri())
        cdp.wait_for("Page.loadEventFired", timeout)
        result = cdp.call(
            "Runtime.evaluate",
            session,
            returnByValue=True,
            expression=(
                "({title: document.title, images: Array.from(document.images).map(i => "
                "({src: i.src.slice(0, 40), complete: i.complete, naturalWidth: i.naturalWidth}))})"
            ),
        )["result"]["value"]
        check = PageCheck(images=result["images"], title=result["title"])
        for ev in cdp.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                check.console_errors.append(
                    " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                )
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                check.console_errors.append(str(details.get("exception", {}).get("description") or details.get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                check.console_errors.append(str(params["entry"].get("text")))
        cdp.ws.close()
        return check
    finally:
        proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)
