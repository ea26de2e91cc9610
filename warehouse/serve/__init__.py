"""`warehouse serve`: a read-only web viewer of the warehouse (runs, trials, trajectories, diffs,
the canned queries, search), a layer over the library as the CLI is.

- pages.py: what each page shows, read through warehouse.readonly (time limit, row cap), as
  plain data;
- diff.py: two trajectories aligned turn by turn;
- app.py: the Flask application (routes, headers: a strict Content-Security-Policy, GET only);
- server.py: the threaded WSGI server the command runs;
- templates/ and static/: Jinja2 (autoescaped) and the one stylesheet and script, all bundled.

Flask is imported only here, so no other command pays for it."""
