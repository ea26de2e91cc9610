"""Each PostgreSQL warehouse's own read role, `warehouse_reader_<database>`: what ad-hoc SQL and
the canned queries run as (warehouse.readonly), and what a teammate is granted to read this one
warehouse and nothing else on the server (README, "Team set-up").

Roles belong to the whole cluster, grants to one database: the role is named for its database,
and only that database grants it anything. Migration 0011 creates it; `warehouse db upgrade`
applies grant() again at the head revision, so a database copied from another by
`CREATE DATABASE … TEMPLATE` (which holds the template's grants, to the template's role) gets
its own role and takes the template's away."""

from __future__ import annotations

import hashlib
import re

from sqlalchemy import Connection

PREFIX = "warehouse_reader_"
_LONGEST = 63  # bytes in a PostgreSQL identifier (NAMEDATALEN - 1); longer ones are cut
_HASH = 12  # hex digits of SHA-256: names that need one never meet by chance

# Whether a role may read the warehouse in this database: it may use the schema and read the
# version table (NULL, so false, where there is none). Asked by readonly and reader_role_note.
# A template: {role} is an SQL expression for the role's oid.
READS_HERE = ("coalesce(has_schema_privilege({role}, to_regnamespace('public'), 'USAGE') AND "
              "has_table_privilege({role}, to_regclass('public.alembic_version'), 'SELECT'), false)")


def reader_role(database: str) -> str:
    """The read role of the database named `database`: `warehouse_reader_<database>` when the
    name is lowercase letters, digits and `_` and short enough to fit; otherwise the name
    lowercased, every run of other characters as `_`, cut to fit, then `_` and the first 12 hex
    digits of the SHA-256 of the name as it is (so `Team-A` and `team_a` get different roles).
    Either way an identifier that needs no quoting and fits PostgreSQL's 63 bytes."""
    if re.fullmatch(r"[a-z0-9_]+", database) and len(PREFIX) + len(database) <= _LONGEST:
        return PREFIX + database
    stem = re.sub(r"[^a-z0-9_]+", "_", database.lower())[:_LONGEST - len(PREFIX) - 1 - _HASH]
    return f"{PREFIX}{stem}_{hashlib.sha256(database.encode()).hexdigest()[:_HASH]}"


def grant(conn: Connection) -> None:
    """Give this database's read role what it needs, and no other warehouse's reader anything
    here. Idempotent. On a PostgreSQL connection in a transaction, as the tables' owner:

    - the role is created (NOLOGIN) where it is missing and this user may create roles;
    - it may use the schema and read every table and view, now and (default privileges) those
      this user creates later (the next migrations', the search index);
    - this user is made a member, where it may be, so it may take the role on (SET ROLE);
    - every other warehouse reader role (the cluster-wide `warehouse_reader` of migrations
      0007-0010, another database's `warehouse_reader_…`, as a template's copy holds) loses
      what it was granted here.

    A step this user may not take (CREATEROLE, ADMIN on the role) is skipped, not the upgrade:
    `db upgrade` then says what a superuser can do (warehouse.readonly.reader_role_note)."""
    [database] = conn.exec_driver_sql("SELECT current_database()").one()
    role = reader_role(database)
    # No quoting needed (reader_role's names are plain identifiers), and none of the text's
    # own: the name is written into the block, which takes no parameters.
    assert re.fullmatch(r"[a-z0-9_]+", role), role
    block = f"""
        DO $$
        DECLARE
            other name;
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                BEGIN
                    CREATE ROLE {role} NOLOGIN;
                -- duplicate_object, unique_violation: another session created it meanwhile.
                EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN NULL;
                END;
            END IF;
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                BEGIN
                    GRANT USAGE ON SCHEMA public TO {role};  -- PUBLIC has it too, by default
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
                GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};
                ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {role};
                IF NOT pg_has_role('{role}', 'MEMBER') THEN
                    BEGIN
                        EXECUTE 'GRANT {role} TO ' || quote_ident(current_user);
                    EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN NULL;
                    END;
                END IF;
            END IF;
            -- Every other reader that holds a grant here: on a table or view, on the schema, or
            -- in the default privileges.
            FOR other IN
                SELECT r.rolname FROM pg_roles r
                WHERE (r.rolname = 'warehouse_reader' OR starts_with(r.rolname, '{PREFIX}'))
                  AND r.rolname <> '{role}'
                  AND (EXISTS (SELECT FROM pg_class c, aclexplode(c.relacl) a
                               WHERE c.relnamespace = 'public'::regnamespace AND a.grantee = r.oid)
                       OR EXISTS (SELECT FROM pg_namespace n, aclexplode(n.nspacl) a
                                  WHERE n.nspname = 'public' AND a.grantee = r.oid)
                       OR EXISTS (SELECT FROM pg_default_acl d, aclexplode(d.defaclacl) a
                                  WHERE a.grantee = r.oid))
            LOOP
                EXECUTE 'ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM ' || quote_ident(other);
                EXECUTE 'REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM ' || quote_ident(other);
                BEGIN
                    EXECUTE 'REVOKE USAGE ON SCHEMA public FROM ' || quote_ident(other);
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
            END LOOP;
        END $$"""
    # Roles are the whole server's: another database's upgrade may deadlock with this one on
    # them, or drop a role this block has just looked up; schema._run runs the whole migration
    # transaction again (schema._role_race).
    conn.exec_driver_sql(block)
