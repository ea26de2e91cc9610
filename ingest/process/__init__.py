"""How an ingest runs, whatever it reads or writes: a forked reader process (`worker`), a
read-ahead thread (`prefetch`), the cyclic garbage collector paused during a unit (`collector`).
Nothing here imports the rest of `ingest` or the warehouse."""
