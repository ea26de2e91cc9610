"""The Flask application of `warehouse serve`: one route per page, each a stable URL.

    /                                   the runs (filters and sort as query parameters)
    /run/<RUN_KEY>                      a run's trials, paged
    /run/<RUN_KEY>/trial/<TRIAL>        a trial's trajectory; #turn-N is turn N
    /diff?a=RUN/TRIAL&b=RUN/TRIAL       two trials side by side, the first difference marked
    /matrix                             the solve matrix, each cell a link to its trials
    /query/<NAME>                       a canned query (?format=csv|json downloads it)
    /search?q=TEXT                      turns holding TEXT, each a link to its turn

Run keys may hold slashes (Hub dataset names), so a run's routes take the rest of the path and
split it at its last `/trial/`.

Safe to open on anything: every text is escaped by Jinja2's autoescape; the pages carry a strict
Content-Security-Policy (the bundled script and stylesheet only, nothing inline, no other origin);
only GET and HEAD are answered (405 otherwise). (The server refuses, on a loopback address, a
request naming another host: server.py.)"""

from __future__ import annotations

import io
import re
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

from flask import Flask, Response, abort, g, redirect, render_template, request
from flask.templating import Environment
from markupsafe import Markup, escape
from werkzeug.exceptions import HTTPException

from warehouse.cli.output import Format, write_rows
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.serve import pages
from warehouse.serve.pages import Viewer

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
SAFE_METHODS = ("GET", "HEAD")
SEARCH_LIMIT = 200


class _Environment(Environment):
    """Jinja's environment, reading `x.name` off the pages' dicts as it would, faster.

    Jinja tries an attribute first and the item after it: on a dict that is an AttributeError
    raised and caught for every field a template reads (tens of thousands on a long trial's
    page, a third of its time). A name no dict has as an attribute can only be an item, so it is
    looked up as one at once; the names dicts do have (`items`, `get`) go Jinja's way, so a
    stored key named `items` never hides the method."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)


_DICT_ATTRIBUTES = frozenset(dir(dict))


def create_app(viewer: Viewer, *, title: str = "") -> Flask:
    """The application over `viewer`'s database; `title` names the database on every page."""
    app = Flask(__name__)
    app.jinja_environment = _Environment
    app.config.update(JSON_SORT_KEYS=False, TEMPLATES_AUTO_RELOAD=False)
    app.jinja_env.autoescape = True
    app.jinja_env.filters.update(text=_text, number=_format_number, when=_format_when, seconds=_format_seconds,
                                 pct=_pct, urlpart=_urlpart)
    app.jinja_env.globals.update(url_with=_url_with, run_url=run_url, trial_url=trial_url, db_name=title)

    @app.before_request
    def _guard():
        g.started = time.perf_counter()
        if request.method not in SAFE_METHODS:
            abort(405)

    @app.after_request
    def _headers(response: Response) -> Response:
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)  # a route's own (the text's sandbox) stands
        # What the page cost the server (its reads and its template), for the browser's network
        # panel and the benchmark (bench/serve.py); a streamed body's time would not be in it.
        if "started" in g:
            response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - g.started) * 1000:.1f}"
        if response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(WarehouseError)
    def _refused(exc: WarehouseError):
        status = 404 if isinstance(exc, pages.NotFound) else 400
        return render_template("error.html", message=str(exc), status=status), status

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        response = exc.get_response()
        if exc.code == 405:
            response.headers["Allow"] = ", ".join(SAFE_METHODS)
        response.data = render_template("error.html", message=exc.description, status=exc.code)
        response.mimetype = "text/html"
        return response

    @app.get("/")
    def runs():
        filters = pages.filters_from(_lists())
        sort, desc = request.args.get("sort", "name"), _flag("desc")
        data = pages.runs_page(viewer, filters, sort=sort, desc=desc)
        return render_template("runs.html", **data, filters=filters, sort=sort, desc=desc)

    @app.get("/run/<path:rest>")
    def run(rest: str):
        key, sep, name = rest.rpartition("/trial/")
        if sep:
            return _trial(key, name)
        filters = pages.filters_from(_lists())
        sort, desc = request.args.get("sort", "trial"), _flag("desc")
        data = pages.trials_page(viewer, rest, filters, outcome=request.args.get("outcome") or None, sort=sort,
                                 desc=desc, page=_int("page", 1), size=_int("size", pages.PAGE_SIZE))
        return render_template("trials.html", **data, filters=filters, sort=sort, desc=desc,
                               outcome=request.args.get("outcome") or "")

    def _trial(run_key: str, name: str):
        data = pages.trial_page(viewer, run_key, name, source=request.args.get("source") or None,
                                episode=_optional_int("episode"))
        trial = data["trial"]
        if (trial["run_key"], trial["trial_name"]) != (run_key, name):
            # A run name or prefix, a trial-name prefix: sent on to the trial's own, stable URL.
            target = trial_url(trial["run_key"], trial["trial_name"], **request.args.to_dict(flat=False))
            return redirect(target, code=302)
        data["others"] = list(zip(data["others"], episode_urls(run_key, name, data["others"])))
        return render_template("trial.html", **data)

    @app.get("/trial/<int:trial_id>/text")
    def turn_text(trial_id: int):
        text = pages.turn_text(viewer, trial_id, source=request.args.get("source", ""),
                               episode=_int("episode", 0), turn=_int("turn", 0))
        response = Response(text, mimetype="text/plain")
        response.headers["Content-Security-Policy"] = "sandbox"
        return response

    @app.get("/diff")
    def diff():
        a, b = request.args.get("a", ""), request.args.get("b", "")
        if not a or not b:
            return render_template("diff.html", a=a, b=b, pair=None)
        return render_template("diff.html", a=a, b=b, pair=pages.diff_page(viewer, a, b))

    @app.get("/matrix")
    def matrix():
        filters = pages.filters_from(_lists())
        data = pages.matrix_page(viewer, filters)
        data["grid"] = _matrix_rows(data["runs"], data["grid"])
        return render_template("matrix.html", **data, filters=filters)

    @app.get("/queries")
    def queries():
        from warehouse.queries import QUERIES

        return render_template("queries.html", queries=QUERIES.values())

    @app.get("/query/<name>")
    def query(name: str):
        filters = pages.filters_from(_lists())
        data = pages.query_page(viewer, name, request.args, filters)
        form = request.args.get("format", "html")
        if form in ("csv", "json"):
            # What `warehouse query NAME --format csv/json` prints for the same parameters.
            out = io.StringIO()
            write_rows(data["columns"], data["raw"], Format(form), out)
            return _download(name, form, out.getvalue(), "text/csv" if form == "csv" else "application/json")
        if form != "html":
            raise WarehouseError(f"format must be html, csv or json, not {form!r}")
        return render_template("query.html", **data, filters=filters)

    @app.get("/search")
    def search():
        q, regex = request.args.get("q", ""), _flag("regex")
        data = None
        if q:
            data = pages.search_page(viewer, q, filters=pages.filters_from(_lists()), regex=regex,
                                     role=request.args.get("role") or None, limit=min(_int("limit", 50), SEARCH_LIMIT))
        return render_template("search.html", q=q, regex=regex, data=data)

    return app


# --- request values --------------------------------------------------------------------------

def _lists() -> dict[str, list[str]]:
    return {name: request.args.getlist(name) for name in request.args}


def _flag(name: str) -> bool:
    return request.args.get(name, "") not in ("", "0", "false", "off", "no")


def _int(name: str, default: int) -> int:
    value = request.args.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise WarehouseError(f"{name} must be a whole number, not {value!r}") from None


def _optional_int(name: str) -> int | None:
    return _int(name, -1) if request.args.get(name) not in (None, "") else None


# --- URLs --------------------------------------------------------------------------------------

def _urlpart(value: Any) -> str:
    return quote(str(value), safe="")


def run_url(run_key: str, **params: Any) -> str:
    # A key's slashes stay slashes (the route takes a path); everything else is escaped.
    path, params = "/run/" + quote(run_key, safe="/"), _clean(params)
    return path + ("?" + urlencode(params, doseq=True) if params else "")


def trial_url(run_key: str, trial_name: str, **params: Any) -> str:
    base, params = "/run/" + quote(run_key, safe="/") + "/trial/" + quote(trial_name, safe=""), _clean(params)
    return base + ("?" + urlencode(params, doseq=True) if params else "")


def episode_urls(run_key: str, trial_name: str, episodes: list[dict[str, Any]]) -> list[str]:
    """trial_url(run_key, trial_name, source=…, episode=…) of each of a trial's episodes (a long
    trial lists a thousand): the trial's path and each source's parameter made once."""
    base, sources = trial_url(run_key, trial_name), {}
    urls = []
    for ep in episodes:
        source = ep["trace_source"]
        if source not in sources:
            sources[source] = urlencode(_clean({"source": source}))
        query = "&".join(part for part in (sources[source], urlencode(_clean({"episode": ep["episode_index"]}))) if part)
        urls.append(base + ("?" + query if query else ""))
    return urls


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    # `is`, not `in`: 0 == False, and episode 0 is a value.
    return {k: v for k, v in params.items() if not (v is None or v is False or v == "" or v == [])}


def _url_with(**changes: Any) -> str:
    """This page's URL with some query parameters changed (None removes one)."""
    args = {k: request.args.getlist(k) for k in request.args}
    for key, value in changes.items():
        if value is None or value is False or value == "":
            args.pop(key, None)
        else:
            args[key] = [str(value)]
    query = urlencode(args, doseq=True)
    return request.path + ("?" + query if query else "")


def _matrix_rows(runs: list[tuple[str, str]], grid: list[tuple[str, list]]) -> list[tuple[str, Markup]]:
    """Each task with its row of cells as HTML: a matrix has thousands of cells, which a
    template renders several times slower. A link is escaped here, as Jinja would (though
    quote_plus leaves nothing to escape), its two parts each once: the run's path once per
    column, the task's query once per row. The class (all, some, none) and the counts ("2/5")
    are pages.matrix_page's own words and numbers."""
    bases = [str(escape(run_url(key))) for key, _ in runs]
    rows = []
    for task, cells in grid:
        query = str(escape("?task=" + quote_plus(task)))  # what urlencode({"task": task}) gives
        rows.append((task, Markup("".join(
            f'<td class="cell {c[0]}"><a href="{base}{query}">{c[1]}</a></td>' if c
            else '<td class="cell missing"></td>' for base, c in zip(bases, cells)))))
    return rows


# --- values as the pages show them ----------------------------------------------------------

# Bidirectional embeddings, overrides and isolates: obeyed by a browser, they reorder the text
# after them (a trial name that reads as another's, "Trojan source"); shown as their code instead.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def _text(value: Any) -> str:
    """Stored text for a page: control characters and bidi controls shown, not obeyed
    (escaping is Jinja's)."""
    if value is None:
        return ""
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", printable(str(value)))


def _format_number(value: Any, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if value == value else "NaN"
    return printable(str(value))


def _pct(value: Any) -> str:
    return "" if value is None else f"{value:.1%}"


def _format_when(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return printable(str(value))[:19]


def _format_seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(int(value), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


# --- downloads ---------------------------------------------------------------------------------

def _download(name: str, ext: str, body: str, mimetype: str) -> Response:
    response = Response(body, mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="{name}.{ext}"'
    return response
