"""Schema migrations, run programmatically from the migrations shipped in this package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from db.engine import make_engine
from db.errors import StoreError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _run(engine: Engine, verb: str, revision: str) -> None:
    config = _config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            getattr(command, verb)(config, revision)
    except (CommandError, SQLAlchemyError) as exc:
        where = engine.url.render_as_string(hide_password=True)
        raise StoreError(f"cannot {verb} the database {where} to {revision}: {exc}") from exc


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
