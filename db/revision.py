"""The schema revision this code writes, and whether a database is at it, read without alembic:
opening a store that is up to date (every read command, every run but a store's first) then
costs one query, not alembic's import and its migration scripts (0.2 s of a command's start)."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

# The newest migration's revision (db/migrations/versions); tests/test_store.py checks it
# against alembic's head, so a new migration fails the tests until this names it.
HEAD = "0008"


def at_head(engine: Engine) -> bool:
    """True if the database's ``alembic_version`` names ``HEAD``; False if it names another
    revision, has no such table or cannot be read (alembic then migrates it, or says why)."""
    try:
        with engine.connect() as connection:
            versions = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            return [row[0] for row in versions] == [HEAD]
    except SQLAlchemyError:
        return False
