"""Alembic environment shared by `warehouse db …` and by plain `alembic` from the repo root.

`warehouse` hands over an open connection through config.attributes; plain `alembic` opens
one from $WAREHOUSE_DB."""

from alembic import context

from warehouse.db.engine import make_engine, resolve_url
from warehouse.db.models import metadata

config = context.config
target_metadata = metadata


def _include_object(obj, name, type_, reflected, compare_to) -> bool:
    # The optional search index (`warehouse index build`) lives outside the migrations.
    return not (name or "").startswith("search_")


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=_include_object,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=True,
        compare_type=True,
        transaction_per_migration=True,
    )


def run_migrations_offline() -> None:
    context.configure(url=resolve_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(resolve_url(), for_migrations=True)
    with engine.connect() as connection:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
