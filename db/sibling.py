"""A database next to the store, for data whose tables are not the store's: Optuna's study of
`bisect optimize` (its tables are unprefixed: ``studies``, ``trials``, ``alembic_version``, ...,
and must never meet the store's own).

Next to a SQLite store ``bisect.db`` it is the file ``bisect.NAME.db``, created owner-only as
the store is; next to a PostgreSQL store ``DB`` it is the database ``DB_NAME`` on the same
server, with the same credentials, created when missing. The URL holds the store's password
where it has one: it is kept in memory, never written or shown.
"""

from __future__ import annotations

import os
import re

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url

from db.errors import StoreError

NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def sibling_url(store_url: URL | str, name: str) -> str:
    """The URL of the database ``name`` next to the store at ``store_url`` (made if missing)."""
    if not NAME.match(name):
        raise ValueError(f"a sibling database name is lower-case letters and digits: {name!r}")
    url = make_url(store_url)
    if url.get_backend_name() == "sqlite":
        path = url.database
        if not path or path == ":memory:" or path.startswith("file:"):
            raise StoreError("an in-memory store has no database next to it")
        stem, _ = os.path.splitext(path)
        sibling = f"{stem}.{name}.db"
        try:
            os.close(os.open(sibling, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot create {sibling}: {exc.strerror or exc}") from exc
        return url.set(database=sibling).render_as_string(hide_password=False)
    if url.get_backend_name() == "postgresql":
        database = f"{url.database}_{name}"
        _create_database(url, database)
        return url.set(database=database).render_as_string(hide_password=False)
    raise StoreError(f"no database next to a {url.get_backend_name()} store")


def _create_database(url: URL, database: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            found = connection.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                       {"name": database}).first()
            if found is None:
                quoted = engine.dialect.identifier_preparer.quote_identifier(database)
                connection.execute(text(f"CREATE DATABASE {quoted}"))
    except Exception as exc:
        raise StoreError(f"cannot create the database {database} next to the store: "
                         f"{str(exc).splitlines()[0]}") from None
    finally:
        engine.dispose()
