"""The server `warehouse serve` runs: Werkzeug's threaded WSGI server, one thread per request
(each page opens its own read-only session, so requests do not share a transaction). Bound to
127.0.0.1 unless told otherwise; another address is said out loud, with who can reach it."""

from __future__ import annotations

import gc
import ipaddress
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable

from werkzeug.serving import BaseWSGIServer, make_server, select_address_family

from warehouse.errors import WarehouseError
from warehouse.serve.app import HEADERS, create_app
from warehouse.serve.pages import Viewer

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def reach(host: str) -> str:
    """Who can open the viewer bound to `host`, in words."""
    if is_loopback(host):
        return "only this machine"
    if host in ("0.0.0.0", "::", ""):
        return "anyone who can reach this machine on the network, on any of its addresses"
    return f"anyone who can reach {host} on the network"


def serve(viewer: Viewer, *, host: str, port: int, title: str, open_browser: bool = False,
          say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
          warn: Callable[[str], None] | None = None, ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted. `say` hears the lines a person reads (the address, that it
    stopped), `warn` (else `say`) the warning of who else can read; `ready` gets the URL once the
    socket listens."""
    listening = _listen(host, port)
    try:
        app = _HostChecked(create_app(viewer, title=title), loopback=is_loopback(host))
        server = make_server(host, port, app, threaded=True, fd=listening.fileno())
    finally:
        listening.close()  # the server holds a duplicate of it
    bound = server.socket.getsockname()[1]
    # Everything alive now (Flask, SQLAlchemy, the modules) lives as long as the server: kept out
    # of the collector's full passes, which otherwise walk it all every few pages and put tens of
    # milliseconds on whichever request they land in (measured: p95 131 → 82 ms on the runs page).
    gc.collect()
    gc.freeze()
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    url = f"http://{shown}:{bound}/"
    try:
        if not is_loopback(host):
            (warn or say)(f"warning: serving on {host}: {reach(host)} can read this warehouse (no login)")
        say(f"Serving {title} at {url} (read-only; Ctrl-C to stop)")
        if ready:
            ready(url)
        if open_browser:
            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        # socketserver's loop, not Werkzeug's override of it, which swallows Ctrl-C whole.
        super(BaseWSGIServer, server).serve_forever()
    except KeyboardInterrupt:
        # Ctrl-C, or SIGTERM (which warehouse.errors raises as one), from the moment the
        # address is said: how a server ends, not an error (exit 0).
        say("Stopped.")
    finally:
        server.server_close()


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a refusal (a port in use, an address this
    machine lacks) is one line of ours: Werkzeug's own bind prints two and exits."""
    listening = socket.socket(select_address_family(host, port), socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Werkzeug's own does
        listening.bind((host.strip("[]"), port))
        listening.listen()
    except OSError as exc:
        listening.close()
        raise WarehouseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listening


class _HostChecked:
    """A loopback server answers only requests addressed to a loopback name: a web page the
    user visits cannot reach it by pointing a name of its own at 127.0.0.1 (DNS rebinding)."""

    def __init__(self, app, *, loopback: bool):
        self.app, self.loopback = app, loopback

    def __call__(self, environ, start_response):
        if self.loopback and host_name(environ.get("HTTP_HOST", "")) not in LOOPBACK_NAMES:
            start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8"), *HEADERS.items()])
            return [b"This viewer answers only requests addressed to it by a loopback address.\n"]
        return self.app(environ, start_response)


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:8765` gives `[::1]`."""
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0]
