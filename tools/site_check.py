"""Open every page of the built website in a real browser: `make site-check`.

    python tools/site_check.py docs/_build/html

The site is served on 127.0.0.1 from a thread of this script and opened page by page in
headless Chromium (Debian's `chromium` package), driven through its DevTools protocol over a
websocket. A page fails when it does not load, when a file of the site it asks for is missing,
or when it throws or logs a JavaScript error. Files from other hosts (the badges' images) are
left out of the verdict: the check must pass offline. The search page is asked a question and
must answer it. Screenshots of the landing page, one lesson (its top and its first figure)
and the API reference (its top and `DataLoader`) are saved next to the site, in
`docs/_build/screenshots/`.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import websocket

PAGE_TIMEOUT = 30.0
SETTLE_SECONDS = 0.5
WINDOW = (1280, 900)
SEARCH_QUERY = "sampler"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        """Say nothing per file served: the verdict is what the check prints."""


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `folder` on a free port of 127.0.0.1; returns the server and its base URL."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("No Chromium found: install Debian's package with "
                     "`apt-get install -y chromium` (or put chromium on PATH).")


class Browser:
    """Headless Chromium with one page, spoken to through the DevTools protocol."""

    def __init__(self, executable: str, profile: Path):
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._devtools_port(profile / "DevToolsActivePort")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            pages = [t for t in json.load(reply) if t["type"] == "page"]
        self.socket = websocket.create_connection(
            pages[0]["webSocketDebuggerUrl"], timeout=PAGE_TIMEOUT, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WINDOW[0], height=WINDOW[1],
                  deviceScaleFactor=1, mobile=False)

    def _devtools_port(self, port_file: Path) -> int:
        deadline = time.monotonic() + PAGE_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"Chromium exited at start (code {self.process.returncode}).")
            if port_file.exists() and port_file.read_text().strip():
                return int(port_file.read_text().split()[0])
            time.sleep(0.1)
        raise SystemExit("Chromium did not open its DevTools port within "
                         f"{PAGE_TIMEOUT:.0f} s.")

    def call(self, method: str, **params) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, method: str, timeout: float) -> bool:
        """Collect events until one named `method` arrives (True) or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(event["method"] == method for event in self.events):
                return True
            self.socket.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = json.loads(self.socket.recv())
            except websocket.WebSocketTimeoutException:
                break
            if "method" in message:
                self.events.append(message)
        self.socket.settimeout(PAGE_TIMEOUT)
        return any(event["method"] == method for event in self.events)

    def settle(self, seconds: float) -> None:
        self.wait_for("Never.happens", seconds)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def is_site_file(url: str, base: str) -> bool:
    """A file of the site; not the favicon, which the browser asks for on its own."""
    return url.startswith(base) and url != base + "favicon.ico"


def page_problems(browser: Browser, url: str, base: str) -> list[str]:
    """Open `url`; every reason the page failed (empty when it loaded cleanly)."""
    browser.events.clear()
    navigation = browser.call("Page.navigate", url=url)
    if navigation.get("errorText"):
        return [f"did not load: {navigation['errorText']}"]
    if not browser.wait_for("Page.loadEventFired", PAGE_TIMEOUT):
        return [f"no load event within {PAGE_TIMEOUT:.0f} s"]
    browser.settle(SETTLE_SECONDS)
    problems = []
    for event in browser.events:
        method, params = event["method"], event["params"]
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            problems.append(f"JavaScript exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            text = " ".join(str(arg.get("value", arg.get("description", "")))
                            for arg in params["args"])
            problems.append(f"console.{params['type']}: {text}")
        elif method == "Network.responseReceived":
            response = params["response"]
            if is_site_file(response["url"], base) and response["status"] >= 400:
                problems.append(f"HTTP {response['status']} for {response['url']}")
        elif method == "Log.entryAdded":
            entry = params["entry"]
            local = is_site_file(entry.get("url", ""), base)
            if entry["level"] == "error" and (entry["source"] != "network" or local):
                problems.append(f"{entry['source']} error: {entry['text']}")
    return problems


def external_failures(browser: Browser, base: str) -> int:
    return sum(1 for event in browser.events
               if event["method"] == "Log.entryAdded"
               and event["params"]["entry"]["source"] == "network"
               and not event["params"]["entry"].get("url", "").startswith(base))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site, e.g. docs/_build/html")
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="where the PNGs go (default: SITE/../screenshots)")
    args = parser.parse_args()
    site = args.site.resolve()
    if not (site / "index.html").exists():
        raise SystemExit(f"{args.site} holds no index.html: run `make site` first.")
    shots = (args.screenshots or site.parent / "screenshots").resolve()
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(path.relative_to(site).as_posix() for path in site.rglob("*.html")
                   if not path.relative_to(site).as_posix().startswith("_"))
    lessons = [page for page in pages if page.startswith("notebooks/")]
    # The theme carries the sidebar's scroll position from page to page: the pages that are
    # photographed come first, so that their sidebars start at the top.
    photographed = ["index.html", *lessons[:1], "api.html"]
    pages = photographed + [page for page in pages if page not in photographed]
    server, base = serve(site)
    failures: dict[str, list[str]] = {}
    external = 0
    with tempfile.TemporaryDirectory(prefix="site-check-") as profile:
        browser = Browser(find_browser(), Path(profile))
        try:
            for page in pages:
                problems = page_problems(browser, base + page, base)
                external += external_failures(browser, base)
                if problems:
                    failures[page] = problems
                if page == "index.html":
                    browser.screenshot(shots / "landing.png")
                elif page == "api.html":
                    browser.screenshot(shots / "api.png")
                    browser.evaluate("document.getElementById('course_lib.DataLoader')"
                                     "?.scrollIntoView()")
                    browser.settle(SETTLE_SECONDS)
                    browser.screenshot(shots / "api_dataloader.png")
                elif lessons and page == lessons[0]:
                    browser.screenshot(shots / "lesson.png")
                    browser.evaluate("document.querySelector('.cell_output img')"
                                     "?.scrollIntoView({block: 'center'})")
                    browser.settle(SETTLE_SECONDS)
                    browser.screenshot(shots / "lesson_figure.png")
            search_url = f"{base}search.html?q={SEARCH_QUERY}"
            problems = page_problems(browser, search_url, base)
            hits = 0
            deadline = time.monotonic() + PAGE_TIMEOUT
            while not hits and time.monotonic() < deadline:
                browser.settle(0.2)
                hits = browser.evaluate(
                    "document.querySelectorAll('#search-results li').length") or 0
            if not hits:
                problems.append(f"the search for {SEARCH_QUERY!r} found nothing")
            if problems:
                failures[f"search.html?q={SEARCH_QUERY}"] = problems
        finally:
            browser.close()
            server.shutdown()
            server.server_close()
    for page, problems in failures.items():
        print(f"FAIL {page}")
        for problem in problems:
            print(f"     {problem}")
    print(f"{len(pages) - len(failures)} of {len(pages)} pages loaded without a JavaScript "
          f"error; the search for {SEARCH_QUERY!r} listed {hits} pages; "
          f"{external} files from other hosts (badge images) were not reachable and are not "
          "counted.")
    print(f"Screenshots: {', '.join(str(p) for p in sorted(shots.glob('*.png')))}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
