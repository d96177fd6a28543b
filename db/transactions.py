"""One transaction of the store: the scoped session every read and write runs in, which
commits on success, rolls back on any error and turns SQLAlchemy's errors into StoreError."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db.errors import StoreError


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig) if orig is not None else str(exc).split("\n", 1)[0]


class Transactions:
    """The engine and its sessions; the store's reads and writes build on it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def _session(self, doing: str) -> Iterator[Session]:
        """One transaction: commit on success, roll back on any error, errors as StoreError."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"cannot {doing}: {_reason(exc)}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
