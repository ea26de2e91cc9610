"""The viewer in a real browser: `warehouse serve` started as a user starts it (the CLI, in a
child process), and a Chromium tab on it that records everything a page must not do.

The session's Chromium is conftest's `browser` fixture."""

from __future__ import annotations

import selectors
import subprocess
import threading
import time
from urllib.parse import urlsplit

from procs import start_cli

READY = "Serving "  # the first word of the line serve prints once it listens
SERVE_START = 60.0  # seconds the CLI may take to listen (PostgreSQL's schema check included)


class Server:
    """`warehouse --db URL serve --port 0` in a child process; `url` from its stderr line.
    Its stderr is drained by a thread (Werkzeug logs every request there) and kept in `log`."""

    def __init__(self, db_url: str):
        self.proc = start_cli(db_url, "serve", "--port", "0")
        self.log: list[str] = []
        self.url = self._wait_for_url()
        self.origin = self.url.rstrip("/")
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + SERVE_START
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stderr, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(timeout=deadline - time.monotonic()):
                    break
                line = self.proc.stderr.readline()
                if not line:  # it ended before listening
                    break
                self.log.append(line)
                if line.startswith(READY):
                    # "Serving NAME at http://127.0.0.1:PORT/ (read-only; Ctrl-C to stop)"
                    return line.split(" at ", 1)[1].split(" ", 1)[0]
        self.stop()
        raise AssertionError("serve did not say it listens:\n" + "".join(self.log))

    def _read_rest(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tracebacks(self) -> list[str]:
        return [line for line in self.log if line.startswith("Traceback")]


# Chromium's line for a page answered with an error status: expected on an error page, itself.
FAILED_LOAD = "Failed to load resource: the server responded with a status of"

# Recorded in the page before any of its own scripts run: every Content-Security-Policy
# violation (Chromium also logs them to the console; this is the event the spec defines).
_WATCH_CSP = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', e => {
  window.__csp.push(e.violatedDirective + ' ' + e.blockedURI);
}, true);
"""


class Tab:
    """A browser context on the viewer at `origin`, one viewport, with everything recorded:
    requests to any other origin (aborted), console errors and uncaught exceptions, dialogs
    (dismissed), CSP violations."""

    def __init__(self, browser, origin: str, *, width: int = 1280, height: int = 900):
        self.origin = origin.rstrip("/")
        self.blocked: list[str] = []
        self.errors: list[tuple[str, str]] = []  # (text, url of the page or resource that said it)
        self.dialogs: list[str] = []
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.context.route("**/*", self._route)
        self.context.add_init_script(_WATCH_CSP)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append((f"pageerror: {exc}", "")))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))

    def _route(self, route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" == self.origin:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def _console(self, message) -> None:
        if message.type == "error":
            self.errors.append((message.text, (message.location or {}).get("url", "")))

    def open(self, path: str, *, status: int = 200):
        """Go to `path` and wait for it to load; its status must be `status`."""
        for record in (self.blocked, self.errors, self.dialogs):
            record.clear()
        response = self.page.goto(self.origin + path, wait_until="load")
        assert response is not None and response.status == status, (path, response and response.status)
        self.expected_status = status
        return response

    def problems(self) -> dict[str, list]:
        """What the page did that it must not, by kind (every list empty on a good page)."""
        errors = [text for text, url in self.errors
                  if not (self.expected_status != 200 and text.startswith(FAILED_LOAD)
                          and url == self.page.url)]
        found = self.page.evaluate("""() => ({
            csp: window.__csp || [],
            pwned: typeof window.__pwned !== 'undefined' ? [String(window.__pwned)] : [],
            // Scripts: the one bundled file, nothing inline, nothing made from data.
            scripts: Array.from(document.scripts).filter(s => !s.src || new URL(s.src).origin !== location.origin
                                                          || !s.src.endsWith('/static/viewer.js')).map(s => s.outerHTML.slice(0, 200)),
            // Elements or attributes data could make: images, frames, objects, event handlers, inline styles.
            injected: Array.from(document.querySelectorAll('img, iframe, object, embed, base, meta[http-equiv], [style]'))
                           .map(e => e.outerHTML.slice(0, 200))
                      .concat(Array.from(document.querySelectorAll('*')).flatMap(e => Array.from(e.attributes)
                           .filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name))),
            // Every link stays on this origin over http (no javascript:, data: or other site);
            // the empty data: icon only stops the browser asking for /favicon.ico.
            links: Array.from(document.querySelectorAll('a[href], form[action], link[href]:not([rel=icon][href="data:,"])'))
                        .map(e => e.href || e.action)
                        .filter(h => { const u = new URL(h, location.href); return u.origin !== location.origin; }),
            // The page fits the window: what is wider scrolls inside its own .scroll box.
            overflow: document.documentElement.scrollWidth <= window.innerWidth ? [] :
                [document.documentElement.scrollWidth + ' > ' + window.innerWidth].concat(
                 Array.from(document.querySelectorAll('body *'))
                      .filter(e => e.getBoundingClientRect().right > window.innerWidth
                                   && !e.closest('.scroll') && e.parentElement.getBoundingClientRect().right <= window.innerWidth)
                      .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))),
        })""")
        return {"errors": errors, "blocked": list(self.blocked), "dialogs": list(self.dialogs), **found}

    def close(self) -> None:
        self.context.close()
