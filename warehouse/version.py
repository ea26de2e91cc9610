"""The warehouse's version, in one place: pyproject.toml reads it from here when the package is
built, and `warehouse.__version__`, `warehouse --version`, the ingest ledger and the export's
dataset card import it from here. A module of its own, importing nothing, so that the ingest
package can take it without importing the warehouse's API (which imports the ingest)."""

__version__ = "0.1.0"
