"""The screenshots of `warehouse serve` in the README: a small, real warehouse (examples/sample
and a Harbor job with tool calls, tests/fixtures/harbor/jobs/) ingested into a scratch SQLite
file, served by the CLI, photographed by a headless Chromium (Debian's `chromium`, through
playwright) with every request off the server's origin aborted.

    python -m tools.serve_screenshots [--out docs]

writes OUT/serve-runs.png (the runs), OUT/serve-trial.png (a trial with tool calls) and
OUT/serve-diff.png (two attempts of one task side by side), 1,280 pixels wide. Only the CLI is
run (in child processes), so this imports nothing of the warehouse."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import quote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "examples" / "sample", ROOT / "tests" / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6")
WIDTH, HEIGHT = 1280, 900
DB = "warehouse.db"

# What each picture shows: (file, path on the server, the window's height: None for the whole page).
JOB = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"
SAMPLE_A, SAMPLE_B = "9f8c2915-4688-461a-8cba-3901225a1cb2", "b421acf4-22ff-44ae-abea-d6ef824bc737"
SHOTS = (
    ("serve-runs.png", "/", None),
    ("serve-trial.png", f"/run/{JOB}/trial/task-calendar__8A83BnJ", 1500),
    ("serve-diff.png", "/diff?a=" + quote(f"{SAMPLE_A}/debug-csv__XM5Mqch", safe="")
                       + "&b=" + quote(f"{SAMPLE_B}/debug-csv__MXuioGU", safe=""), 1200),
)


def cli(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "warehouse", "--db", db, *args]


# The children run in a scratch folder: this checkout's code, whatever is installed.
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


def serve(folder: Path) -> tuple[subprocess.Popen, str]:
    # Run in the warehouse's folder, so the pages name it as a user's would: warehouse.db.
    proc = subprocess.Popen(cli(DB, "serve", "--port", "0"), cwd=folder, env=ENV, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("Serving "):
            # Werkzeug logs every request to stderr from here on: drained, so it never blocks.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, line.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
    proc.wait()
    raise SystemExit("warehouse serve did not start")


def photograph(origin: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    written, blocked = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})

        def route(r):
            parts = urlsplit(r.request.url)
            if f"{parts.scheme}://{parts.netloc}" == origin:
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        for name, path, height in SHOTS:
            page.set_viewport_size({"width": WIDTH, "height": height or HEIGHT})
            response = page.goto(origin + path, wait_until="load")
            if response is None or response.status != 200:
                raise SystemExit(f"{path}: {response and response.status}")
            page.screenshot(path=str(out / name), full_page=height is None)
            written.append(out / name)
        browser.close()
    if blocked:
        raise SystemExit(f"the pages asked for other origins: {blocked}")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="the folder to write the PNGs to")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(cli(DB, "ingest", *map(str, SOURCES)), cwd=scratch, env=ENV, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc, origin = serve(Path(scratch))
        try:
            for path in photograph(origin, args.out):
                print(f"wrote {path}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
