"""Scratch directories in memory (tmpfs), where the machine has one, for the tests whose
SQLite files commit hundreds of times: an Optuna study commits every ask and tell, and each
commit syncs its rollback journal to disk (about 1,000 syncs for a search of 24 trials,
seconds of waiting on a disk, none in memory). What these tests check is not durability."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MEMORY = Path("/dev/shm")


@contextmanager
def in_memory() -> Iterator[Path]:
    """A fresh directory in memory (where there is no tmpfs: the usual temporary directory),
    removed after."""
    where = str(MEMORY) if MEMORY.is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bisect-test-", dir=where) as directory:
        yield Path(directory)
