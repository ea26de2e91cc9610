"""Each database its own read role, `warehouse_reader_<database>`, in place of 0007's one
`warehouse_reader` for the whole cluster: a role granted that one read every warehouse database
on the server, of every owner. This database's reader is created and granted its tables, and
the old role's grants here are revoked (warehouse.db.roles.grant: the same step `db upgrade`
applies again at head, so it is imported, not copied: the role's name must be the one readonly
computes). The old role itself is dropped once no database grants it anything more (the last
warehouse upgraded drops it); a user that may not drop it leaves it, granted nothing here.

A user that may not create roles degrades as in 0007: the grants are made where the role
exists, and `warehouse sql` runs as that user, which `db upgrade` says.

Downgrading revokes this database's reader's grants here (the role stays, with its members,
for an upgrade again: other databases copied from this one may use it) and grants 0007's role
again, as 0007 did.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from alembic import op

from warehouse.db import roles

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

OLD_ROLE = "warehouse_reader"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    roles.grant(bind)
    # 2BP01 dependent_objects_still_exist: another database still grants it something. 40P01
    # deadlock_detected: another database's upgrade is dropping it too (roles are the server's);
    # either way it is left for a later upgrade, as a role other databases use is.
    op.execute(f"""
        DO $$
        BEGIN
            DROP ROLE IF EXISTS {OLD_ROLE};
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege OR deadlock_detected THEN NULL;
        END $$""")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    role = roles.reader_role(bind.exec_driver_sql("SELECT current_database()").scalar())
    # 0007's upgrade, as it was, after this database's reader's grants are revoked.
    op.execute(f"""
        DO $$
        BEGIN
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {role};
                REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM {role};
                BEGIN
                    REVOKE USAGE ON SCHEMA public FROM {role};
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
            END IF;
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{OLD_ROLE}') THEN
                BEGIN
                    CREATE ROLE {OLD_ROLE} NOLOGIN;
                EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN NULL;
                END;
            END IF;
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{OLD_ROLE}') THEN
                BEGIN
                    GRANT USAGE ON SCHEMA public TO {OLD_ROLE};
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
                GRANT SELECT ON ALL TABLES IN SCHEMA public TO {OLD_ROLE};
                ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {OLD_ROLE};
                IF NOT pg_has_role('{OLD_ROLE}', 'MEMBER') THEN
                    BEGIN
                        EXECUTE 'GRANT {OLD_ROLE} TO ' || quote_ident(current_user);
                    EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN NULL;
                    END;
                END IF;
            END IF;
        END $$""")
