"""The database: choosing it (engine), its schema (schema, models) and transactions (session)."""

# Where the database is when --db does not say: kept here, free of imports, so that the CLI can
# declare its --db option without importing SQLAlchemy (see warehouse.cli.app).
DEFAULT_DB = "warehouse.db"
ENV_VAR = "WAREHOUSE_DB"
