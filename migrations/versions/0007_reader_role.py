"""The PostgreSQL role `warehouse_reader`, which may only read the warehouse's tables and views:
`warehouse sql` and the canned queries run as it (SET LOCAL ROLE), so even through a superuser's
URL an ad-hoc statement cannot reach files, programs or other sessions.

Roles belong to the whole cluster: the role is created once (by whichever database is upgraded
first, if the user may create roles), and each database grants it SELECT on its own tables, now
and (ALTER DEFAULT PRIVILEGES) on those the same user creates later. The user running the
upgrade is made a member, so it may take the role on. A user that may not create roles nor
grant this one leaves the grants in place and `warehouse sql` runs as that user, guarded by the
grammar check and the function denylist (`db upgrade` says so). Nothing on SQLite.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

ROLE = "warehouse_reader"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Creating the role and joining it may fail for want of privilege (CREATEROLE, ADMIN on the
    # role): that step is skipped, not the upgrade. duplicate_object or unique_violation: another
    # database's upgrade created it meanwhile. The grants are the tables' owner's to give.
    op.execute(f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN
                BEGIN
                    CREATE ROLE {ROLE} NOLOGIN;
                EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN NULL;
                END;
            END IF;
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN
                BEGIN
                    GRANT USAGE ON SCHEMA public TO {ROLE};  -- PUBLIC has it too, by default
                EXCEPTION WHEN insufficient_privilege THEN NULL;
                END;
                GRANT SELECT ON ALL TABLES IN SCHEMA public TO {ROLE};
                ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {ROLE};
                IF NOT pg_has_role('{ROLE}', 'MEMBER') THEN
                    BEGIN
                        EXECUTE format('GRANT {ROLE} TO %I', current_user);
                    EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN NULL;
                    END;
                END IF;
            END IF;
        END $$""")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # The role stays: other databases of the cluster may use it. This database's grants go.
    op.execute(f"""
        DO $$
        BEGIN
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN
                ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {ROLE};
                REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM {ROLE};
                REVOKE USAGE ON SCHEMA public FROM {ROLE};
            END IF;
        END $$""")
