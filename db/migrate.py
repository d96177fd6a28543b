"""Schema migrations, run programmatically from the migrations shipped in this package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from db.engine import make_engine
from db.errors import StoreError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The PostgreSQL advisory lock that migrations of one database take (any constant of our own):
# two orchestrators opening a new shared store at once would both create its tables
MIGRATION_LOCK = 0x6269736563740001


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@contextmanager
def _all_or_nothing(engine: Engine) -> Iterator[Connection]:
    """One transaction around every statement of a migration, DDL included: a failure midway
    (a full disk) leaves the database as it was, never half-made tables.

    pysqlite commits before each CREATE/ALTER on its own, so for SQLite the transaction is
    opened by hand: BEGIN IMMEDIATE also takes the write lock first, so two processes creating
    one store run one after the other (the second finds it done). On PostgreSQL a transaction
    advisory lock does the same."""
    with engine.connect() as connection:
        if engine.dialect.name != "sqlite":
            with connection.begin():
                if engine.dialect.name == "postgresql":
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
                yield connection
            return
        dbapi = connection.connection.driver_connection
        assert dbapi is not None
        legacy = dbapi.isolation_level
        dbapi.isolation_level = None  # pysqlite's own BEGIN/COMMIT off: ours alone
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield connection
                connection.commit()
            finally:
                if dbapi.in_transaction:
                    dbapi.rollback()
                connection.rollback()
        finally:
            dbapi.isolation_level = legacy


def _run(engine: Engine, verb: str, revision: str) -> None:
    config = _config()
    try:
        with _all_or_nothing(engine) as connection:
            config.attributes["connection"] = connection
            getattr(command, verb)(config, revision)
    except (CommandError, SQLAlchemyError) as exc:
        where = engine.url.render_as_string(hide_password=True)
        reason = getattr(exc, "orig", None) or exc  # the driver's words, without SQLAlchemy's
        raise StoreError(f"cannot {verb} the database {where} to {revision}: {reason} "
                         "(nothing was changed)") from exc


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    _run(engine, "upgrade", revision)


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` (a SQLAlchemy URL or a file path) to ``revision``."""
    engine = make_engine(url)
    try:
        upgrade_engine(engine, revision)
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        _run(engine, "downgrade", revision)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    """The revision the database is at, ``None`` if it was never migrated."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot read the schema revision: {exc}") from exc
    finally:
        engine.dispose()
