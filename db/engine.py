"""Engines: URL normalisation and the SQLite connection pragmas (the only SQLite-only code)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
BUSY_TIMEOUT_MS = 30_000


def to_url(url_or_path: str | Path, create: bool = True) -> str:
    """A SQLAlchemy URL as is (``postgresql://`` means psycopg 3); a plain path becomes
    ``sqlite:///<absolute path>`` (its directory made, unless ``create`` is false)."""
    text = str(url_or_path)
    if text.startswith("postgresql://"):  # SQLAlchemy 2.0 would pick psycopg2: we use psycopg 3
        return "postgresql+psycopg://" + text.removeprefix("postgresql://")
    if _URL.match(text):
        return text
    path = Path(text).expanduser().resolve()
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_engine(url_or_path: str | Path, create: bool = True) -> Engine:
    engine = create_engine(to_url(url_or_path, create))
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()
