"""What readers hand the writer: the normalized records (`records`) and the batches prepared
from them without the database (`prepare`: texts hashed and split, rows shaped), plain values
that cross a process boundary cheaply."""
