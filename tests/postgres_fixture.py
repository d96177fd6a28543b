"""A real PostgreSQL server for the test run, a fresh database per test, and ``store_url``: a
fresh store on each backend (SQLite, then PostgreSQL), for the tests that run on both.

conftest imports the fixtures (``from tests.postgres_fixture import postgres_server,
postgres_url, store_url``). The server is Debian's (``make system-packages`` installs
``postgresql``), run from a private data directory, unix socket directory and free 127.0.0.1
port, and stopped at the end of the run. PostgreSQL refuses to run as root: as root, every
server command runs as the ``postgres`` user. Under CI a missing server fails the run instead of
skipping.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from experiments.twin.pool import free_port
from tests.support import workers
from tests.support.reaper import reaper, start_time
from tests.support.scratch import in_memory

SUPERUSER = "bisect"
# Short and in /tmp: a unix socket path must stay under 108 bytes, and pytest's own temp dirs
# (mode 0700, owned by root) are out of reach of the postgres user.
BASE = Path("/tmp")
PREFIX = "bisect-pg-"
OWNER = "owner.pid"  # the pid of the test process a server belongs to
# A throwaway server: durability off makes CREATE DATABASE and commits fast.
SERVER_OPTIONS = ("-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                  "-c max_connections=50 -c shared_buffers=32MB")


def unavailable(reason: str) -> NoReturn:
    """Fail under CI (a skip there would hide a missing package), skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def pg_bindir() -> Path | None:
    """The newest server of Debian's layout (/usr/lib/postgresql/N/bin), else one on PATH."""
    found = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")]
    if found:
        return max(found, key=lambda p: int(p.parent.parent.name)).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


@dataclass(frozen=True)
class PostgresServer:
    bindir: Path
    root: Path  # data/, sock/, server.log
    port: int
    user: str | None  # the OS user the server runs as; None: this process's user

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        extra: dict[str, Any] = {}
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            extra = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [],
                     "env": {**os.environ, "HOME": entry.pw_dir, "USER": self.user}}
        done = subprocess.run(argv, capture_output=True, text=True, cwd=self.root, timeout=90,
                              **extra)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done

    def execute(self, template: str, database: str) -> None:
        """``template`` with ``{}`` for a database name, run as the superuser outside a
        transaction (CREATE/DROP DATABASE cannot run inside one)."""
        import psycopg
        from psycopg import sql

        statement = sql.SQL(template).format(sql.Identifier(database))
        with psycopg.connect(host=str(self.socket_dir), port=self.port, user=SUPERUSER,
                             dbname="postgres", autocommit=True) as connection:
            connection.execute(statement)

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.execute("CREATE DATABASE {}", name)
        return name

    def drop_database(self, name: str) -> None:
        self.execute("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(bindir: Path) -> None:
    """Stop and remove the servers of test runs that were killed before their teardown."""
    for root in BASE.glob(f"{PREFIX}*"):
        try:
            owner = int((root / OWNER).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if owner == os.getpid() or _alive(owner):
            continue
        user = pwd.getpwuid(root.stat().st_uid).pw_name if os.geteuid() == 0 else None
        stop_server(PostgresServer(bindir, root, 0, user))
        shutil.rmtree(root, ignore_errors=True)


def start_server(bindir: Path) -> PostgresServer:
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no `postgres` user to run PostgreSQL as")
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=BASE))
    (root / "sock").mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (root, root / "sock"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    server: PostgresServer | None = None
    try:
        (root / OWNER).write_text(str(os.getpid()))
        run_as = PostgresServer(bindir, root, 0, user)
        run_as.run(str(bindir / "initdb"), "-D", str(root / "data"), "-U", SUPERUSER,
                   "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
        for _attempt in range(3):  # the port may be taken between choosing it and listening
            server = PostgresServer(bindir, root, free_port(), user)
            options = f"-k {root / 'sock'} -h 127.0.0.1 -p {server.port} {SERVER_OPTIONS}"
            started = server.run(str(bindir / "pg_ctl"), "start", "-w", "-t", "60",
                                 "-D", str(root / "data"), "-l", str(root / "server.log"),
                                 "-o", options, check=False)
            if started.returncode == 0:
                return server
        log = (root / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{log}")
    except BaseException:
        if server is not None:
            stop_server(server)
        shutil.rmtree(root, ignore_errors=True)
        raise


def stop_server(server: PostgresServer) -> None:
    if (server.root / "data" / "postmaster.pid").exists():
        server.run(str(server.bindir / "pg_ctl"), "stop", "-w", "-m", "fast",
                   "-D", str(server.root / "data"), check=False)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run (start ~1 s), stopped and removed at the end."""
    workers.only_once(tmp_path_factory, "postgres_server")
    bindir = pg_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        unavailable("PostgreSQL is not installed (`make system-packages` installs postgresql)")
    try:
        import psycopg  # noqa: F401 - the driver the URLs name
    except ImportError:
        unavailable("psycopg is not installed (the `dev` extra has it)")
    reap_orphans(bindir)
    server = start_server(bindir)
    # If this run is killed, its reaper stops the server at once (the next run removes the rest).
    postmaster = int((server.root / "data" / "postmaster.pid").read_text().split()[0])
    reaper().send(process=postmaster, start=start_time(postmaster))
    try:
        yield server
    finally:
        stop_server(server)
        shutil.rmtree(server.root, ignore_errors=True)
    reaper().send(process_gone=postmaster)


# ``store_url``'s backends, both real: for a test that is real on SQLite as well (it runs twins).
BOTH_REAL = [pytest.param("sqlite", marks=pytest.mark.real),
             pytest.param("postgresql", marks=pytest.mark.real)]


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A SQLAlchemy URL of a fresh, empty database, dropped after the test."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.pure),
                        pytest.param("postgresql", marks=pytest.mark.real)])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh store, once on each backend: a SQLite file, then a new database on the run's
    real PostgreSQL server (as SQLAlchemy URLs: what ``--store`` and ``Store.open`` take).

    The backend is the test's tier (tests/support/tiers.py): the SQLite one is pure, the
    PostgreSQL one real, so a module of such tests marks its other tests one by one. A test that
    is real on both backends says so with ``@pytest.mark.parametrize("store_url", BOTH_REAL,
    indirect=True)``.

    The SQLite file is in memory (tests/support/scratch.py): creating a store commits each
    migration and syncs it, ~50 ms of waiting on the disk a store; durability is not what these
    tests check (test_store.py's tests of the file itself take a file in ``tmp_path``)."""
    if request.param == "postgresql":
        yield str(request.getfixturevalue("postgres_url"))
        return
    with in_memory() as directory:
        yield f"sqlite:///{directory / 'bisect.db'}"
