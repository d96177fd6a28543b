"""No half-made state: a disk that fills while a new store is created leaves no half-made store
(the next run completes it); a run refused before it starts leaves its campaign `refused`.

The disk is a real one: a small tmpfs mounted for the test (root, as CI runs)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from db.errors import StoreError
from db.migrate import current_revision, head_revision
from db.store import Store
from deploy import locks
from deploy.transports.local import LocalTransport
from orchestrator.cli import app
from orchestrator.demo import twin_pool
from tests.support import kill_points

pytestmark = pytest.mark.real

# From too small for the first page to enough for the whole schema: every size fails at a
# different statement of the migrations (measured: 48 KiB stops at the first CREATE TABLE,
# 128 KiB at the last indexes).
SIZES_KIB = range(32, 177, 16)


def _mount(where: Path, kib: int, remount: bool = False) -> None:
    options = f"{'remount,' if remount else ''}size={kib}k,mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    where = tmp_path / "disk"
    where.mkdir()
    yield where
    subprocess.run(["umount", str(where)], check=False)


def _tables(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as connection:
        return [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') ORDER BY name")]


def test_a_full_disk_during_creation_leaves_no_half_made_store(small_disk: Path) -> None:
    failed = []
    for kib in SIZES_KIB:
        _mount(small_disk, kib)
        db = small_disk / "bisect.db"
        try:
            Store.open(str(db)).close()
        except StoreError as exc:
            failed.append(kib)
            assert "disk is full" in str(exc) or "disk I/O error" in str(exc), str(exc)
            assert "\n" not in str(exc)
        _mount(small_disk, 16 * 1024, remount=True)  # room again (reading needs room too)
        if failed and failed[-1] == kib and db.exists():  # a file, perhaps, but nothing in it
            assert _tables(db) == [], f"{kib} KiB: half-made tables left"
            assert current_revision(str(db)) is None
        with Store.open(str(db)) as store:
            store.create_campaign("c1", "after a full disk", {"name": "x"}, "test")
            assert [c.id for c in store.list_campaigns()] == ["c1"]
        assert current_revision(str(db)) == head_revision()
        subprocess.run(["umount", str(small_disk)], check=True)
    # Not vacuous: the sweep did fill the disk midway through the schema, more than once.
    assert len(failed) >= 4, failed


def _campaign_file(tmp_path: Path, flag: str) -> Path:
    faults = tmp_path / "faults.yaml"
    faults.write_text("rules: []\n")
    spec = {
        "name": "refused",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [{"name": "f", "levels": {"a": {}, "b": {"flags": [flag]}}}],
        "workload": {"sessions": 4, "rounds": 1, "timeout_s": 10},
        "strategy": {"kind": "factorial", "repeats": 1},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _listed(db: Path) -> list[tuple[str, int]]:
    result = CliRunner().invoke(app, ["ls", "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    return [(row["status"], row["trials"]) for row in json.loads(result.stdout)]


def test_a_refused_run_leaves_its_campaign_refused_not_running(tmp_path: Path) -> None:
    db = tmp_path / "bisect.db"
    # The preflight refuses a flag the node's own --help does not list: exit 2.
    bad = _campaign_file(tmp_path, "--no-such-flag")
    result = CliRunner().invoke(app, ["run", str(bad), "--store", str(db)])
    assert result.exit_code == 2, result.output
    assert _listed(db) == [("refused", 0)]

    # A node held by another campaign: exit 1, refused as well; nothing of it is left held.
    good = _campaign_file(tmp_path, "--enable-hierarchical-cache")
    locks.acquire(LocalTransport("here"), "here", str(tmp_path / "services"), "someone-else")
    result = CliRunner().invoke(app, ["run", str(good), "--store", str(db)])
    assert result.exit_code == 1, result.output
    assert _listed(db) == [("refused", 0), ("refused", 0)]
    with Store.open(str(db)) as store:
        assert store.held_locks() == []


def _done_trials(db: Path) -> int:
    rows = kill_points.query(db, "SELECT count(*) FROM trial WHERE status = 'done'")
    return int(rows[0][0]) if rows else 0


def test_a_disk_that_fills_mid_campaign_stops_the_run_and_the_resume_ends_it(
        small_disk: Path, tmp_path: Path, on_shared_ray: dict[str, str]) -> None:
    """The store's disk fills after the first trial: the next trial's write fails whole, the
    run stops with the reason (exit 1), and once there is room the resume ends as an
    uninterrupted run, with nothing of the failed write used as evidence. The run is a process
    of its own (the disk fills beside it); both run on the test run's shared Ray."""
    _mount(small_disk, 16 * 1024)
    bench = kill_points.Bench.make(tmp_path / "work", sessions=12)
    db = small_disk / "bisect.db"
    argv = [kill_points.BISECT, "run", str(bench.campaign), "--store", str(db), "--json"]
    filler = small_disk / "filler"
    try:
        driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**bench.env(), **on_shared_ray}, text=True)
        stored = kill_points.wait_until(lambda: _done_trials(db) >= 1, None, 120)
        assert stored, driver.communicate(timeout=60)[1][-2000:]
        with open(filler, "wb") as out:  # every byte left
            try:
                while True:
                    out.write(b"\0" * (1 << 20))
                    out.flush()
            except OSError:
                pass
        _, err = driver.communicate(timeout=300)
        assert driver.returncode == 1, err[-3000:]
        assert "disk is full" in err and "Traceback" not in err
        killed_at = kill_points.query(db, "SELECT seq, status FROM trial ORDER BY id")
        assert killed_at and all(status in ("done", "running") for _, status in killed_at), \
            (killed_at, err[-3000:])
        assert not list(bench.services.glob("*.pid"))  # the nodes were restored all the same
        filler.unlink()
        [(campaign_id,)] = kill_points.query(db, "SELECT id FROM campaign")
        resumed = CliRunner().invoke(app, ["resume", campaign_id, "--store", str(db), "--json"])
        assert resumed.exit_code == 0, resumed.output[-3000:]
        verdict = json.loads(resumed.stdout)
        assert [c["factors"] for c in verdict["culprits"]] == kill_points.CULPRIT
        states = kill_points.query(db, "SELECT seq, status FROM trial ORDER BY id")
        seqs = [seq for seq, _ in states]
        assert len(seqs) == len(set(seqs))
        assert verdict["cost"]["trials"] == sum(status == "done" for _, status in states)
        assert kill_points.query(db, "PRAGMA integrity_check") == [("ok",)]
    finally:
        filler.unlink(missing_ok=True)
        bench.close()
