"""Headless Chromium over the DevTools protocol (aiohttp's websocket client): open a page, read
its DOM with a JavaScript expression, take a screenshot. For the dashboard's browser test."""
from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import aiohttp

from helpers import await_until


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page. ``async with Browser(width, height) as b: ...``"""

    def __init__(self, width: int = 1400, height: int = 1000, binary: str | None = None) -> None:
        self.binary = binary or chromium_binary()
        self.size = (width, height)
        self.proc: subprocess.Popen | None = None
        # (its helper processes may still write there as it exits: a leftover file is no failure)
        self.profile = tempfile.TemporaryDirectory(prefix="apollo-chromium-", ignore_cleanup_errors=True)
        self.session: aiohttp.ClientSession | None = None
        self.ws = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> "Browser":
        w, h = self.size
        self.proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile.name}", f"--window-size={w},{h}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        # Chromium writes the port it picked here once it listens
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        await await_until(lambda: self.proc.poll() is not None
                          or (port_file.exists() and port_file.read_text().count("\n") >= 1),
                          20, "chromium's DevTools endpoint", 0.05)
        if self.proc.poll() is not None:
            raise RuntimeError(f"chromium exited ({self.proc.returncode}) before its DevTools endpoint started")
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in await r.json() if t["type"] == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session is not None:
            await self.session.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.profile.cleanup()

    async def call(self, method: str, **params) -> dict:
        """One DevTools command; events that come before its answer are skipped."""
        n = next(self._ids)
        await self.ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads((await self.ws.receive()).data)
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str):
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        r = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(r["data"]))
        return path
