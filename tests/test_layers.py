"""The layout's rules, checked on the source: the pure core imports no I/O, dependencies point
one way, and what a user reads (verdict, log, show, report) loads neither Ray nor SSH."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# What the core may not import: I/O libraries, the store, the nodes, the executor, the reports.
IO_MODULES = ("ray", "paramiko", "sqlalchemy", "alembic", "jinja2", "aiohttp", "httptools",
              "uvloop", "orjson", "socket", "subprocess", "asyncio", "threading", "urllib",
              "http", "ssl", "shutil", "tempfile", "db", "deploy", "experiments.twin",
              "experiments.workload", "experiments.collect", "orchestrator.executor",
              "orchestrator.reports", "orchestrator.cli", "orchestrator.stored")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def sources(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


@pytest.mark.pure
def test_the_core_imports_no_io() -> None:
    found = {f"{path.relative_to(REPO)}: {name}"
             for path in sources("orchestrator/core") for name in imported(path)
             if within(name, IO_MODULES)}
    assert sources("orchestrator/core") and not found, sorted(found)


@pytest.mark.pure
@pytest.mark.parametrize("package", ["deploy", "experiments", "db"])
def test_lower_layers_never_import_the_orchestrator(package: str) -> None:
    found = {f"{path.relative_to(REPO)}: {name}"
             for path in sources(package) for name in imported(path)
             if within(name, ("orchestrator",))}
    assert not found, sorted(found)


@pytest.mark.pure
def test_the_executor_is_reached_by_the_driver_and_the_cli_alone() -> None:
    """The core, the store's read path and the reports never import the executor."""
    readers = [*sources("orchestrator/core"), *sources("orchestrator/reports"),
               REPO / "orchestrator/stored.py"]
    found = {f"{path.relative_to(REPO)}: {name}" for path in readers
             for name in imported(path) if within(name, ("orchestrator.executor",))}
    assert not found, sorted(found)


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.pure
def test_the_executor_s_modules_import_no_cycle() -> None:
    """Lazy and type-only imports included: a trial's steps never reach back to the runner
    that chains them (issue 28, G3)."""
    graph = {module_of(path): {name for name in imported(path)
                               if within(name, ("orchestrator.executor",))}
             for path in sources("orchestrator/executor")}
    assert "orchestrator.executor.trial" in graph["orchestrator.executor.driver"]  # it sees them

    def cycle_from(start: str) -> list[str] | None:
        path, seen = [start], set()
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            name = next(stack[-1], None)
            if name is None:
                stack.pop()
                seen.add(path.pop())
            elif name == start:
                return [*path, name]
            elif name not in seen and name not in path:
                path.append(name)
                stack.append(iter(sorted(graph.get(name, ()))))
        return None

    cycles = [cycle for module in graph if (cycle := cycle_from(module)) is not None]
    assert not cycles, [" → ".join(cycle) for cycle in cycles]


@pytest.mark.real
def test_reading_a_campaign_loads_neither_ray_nor_ssh() -> None:
    """In a fresh interpreter: the core, the read path, the reports and the CLI itself (every
    command registered) leave Ray and paramiko unloaded; the driver then loads Ray, and paramiko
    comes with the first SSH transport only (a local campaign's pool actors never pay for it; the
    check can see both)."""
    probe = (
        "import sys, pkgutil, importlib, orchestrator.core\n"
        "for m in pkgutil.walk_packages(orchestrator.core.__path__, 'orchestrator.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "import orchestrator.stored, orchestrator.reports.campaign.html, orchestrator.cli\n"
        "print(sorted(m for m in ('ray', 'paramiko') if m in sys.modules))\n"
        "import orchestrator.executor.driver, orchestrator.executor.ray_pool\n"
        "print(sorted(m for m in ('ray', 'paramiko') if m in sys.modules))\n"
        "from types import SimpleNamespace\n"
        "from deploy.transports.factory import transport_for\n"
        "transport_for(SimpleNamespace(name='n', transport='ssh', host='10.0.0.1', port=22,\n"
        "    user='root', identity_file=None, ssh_config=None, known_hosts=None,\n"
        "    host_key_policy='strict', connect_timeout_s=1.0))\n"
        "print(sorted(m for m in ('ray', 'paramiko') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.split("\n")[:3] == ["[]", "['ray']", "['paramiko', 'ray']"], done.stdout


HEAVY = ("scipy", "numpy", "ray", "paramiko")
STATISTICS = ("scipy", "numpy")


def loaded_by(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The console script run in a fresh interpreter with ``-X importtime``: the run and every
    module it loaded."""
    bisect = Path(sys.executable).parent / "bisect"
    done = subprocess.run([sys.executable, "-X", "importtime", str(bisect), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "typer" in loaded, done.stderr[-2000:]  # the measure sees imports
    return done, loaded


@pytest.mark.real
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["verdict", "--help"],
                                  ["log", "--help"], ["show", "--help"], ["run", "--help"],
                                  ["schema"], ["ls", "--store", "STORE"]])
def test_trivial_commands_import_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    """The console script itself, measured with ``-X importtime``: help, the version and a
    store's list load neither the statistics (scipy, numpy) nor Ray nor SSH."""
    from db.store import Store

    store = tmp_path / "bisect.db"
    with Store.open(str(store)):
        pass
    done, loaded = loaded_by([str(store) if a == "STORE" else a for a in args], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    heavy = sorted(name for name in loaded if within(name, HEAVY))
    assert not heavy, heavy


@pytest.mark.real
def test_show_reads_without_the_statistics_and_verdict_computes_with_them(
        tmp_path: Path) -> None:
    """`bisect show` prints stored trials (a skipped variant among them) and computes nothing:
    no scipy, no numpy. `bisect verdict` recomputes the verdict and may load them: it does,
    which shows that the measure would see them."""
    from db import TrialTiming
    from db.store import Store
    from tests.support.stored import campaign_spec, sessions

    store = str(tmp_path / "bisect.db")
    with Store.open(store) as db:
        db.create_campaign("20260101-120000-abcd", "lazy", campaign_spec("lazy"), "test")
        good = db.variant("20260101-120000-abcd", {"index_k": "fp8", "hicache": "off"})
        bad = db.variant("20260101-120000-abcd", {"index_k": "bf16", "hicache": "on"})
        trial = db.start_trial("20260101-120000-abcd", good.id, 1, "pool-1", 1)
        db.finish_trial(trial, TrialTiming(wall_s=1.0), sessions(8, leaks=2), [], [])
        for seq in (2, 3):  # failed twice: skipped, which `show` names
            db.fail_trial(db.start_trial("20260101-120000-abcd", bad.id, seq, "pool-1", seq),
                          "server exited")
    done, loaded = loaded_by(["show", "last", "--store", store], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("skipped hicache=on,index_k=bf16 (2 attempts): its trials failed: server exited"
            in done.stdout)  # stored without steps: which one failed is not known
    assert not sorted(name for name in loaded if within(name, STATISTICS))
    done, loaded = loaded_by(["verdict", "last", "--store", store], tmp_path)
    assert done.returncode in (0, 3), done.stderr[-2000:]  # inconclusive on one trial
    assert {"scipy", "numpy"} <= loaded


@pytest.mark.real
def test_the_reaper_starts_without_ssh_or_the_campaign_schema(tmp_path: Path) -> None:
    """Every run starts a reaper; most runs end telling it ``done``, when it stops nothing:
    it loads SSH and the campaign's schema only to stop what a killed driver left."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m",
                           "orchestrator.executor.reaper"], input='{"done": true}\n',
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:") and "|" in line}
    assert done.returncode == 0, done.stderr[-2000:]
    assert "deploy.procs" in loaded  # the measure sees imports
    heavy = sorted(name for name in loaded
                   if within(name, ("paramiko", "pydantic", "deploy.transports", "experiments")))
    assert not heavy, heavy
