"""The suite on several workers (pytest-xdist, ``-n 3 --dist loadgroup``, as `make test` runs
it) without multiplying what the run shares: one SSH lab, one systemd lab host, one
PostgreSQL, one demo, one of each campaign store the session fixtures make.

xdist runs session fixtures once per worker. So the tests that share one (a session-scoped
fixture of this suite) are kept on one worker, but for the fixtures of ``PER_WORKER``: each
worker sets its own up (a local Ray: seconds to start, and no test leaves anything in it that
another reads) and they join no group, where the Ray tests would be one group holding half the
suite's time, run by one worker while the other idles. ``groups`` gives each test a group, the
same for the tests joined by a shared fixture or by a module-scoped one (set up once only if the
tests that use it stay together); a module's other tests are a group of their own. Each worker
collects, finds the groups and leaves them in a file; the controller's scheduler (``scheduler``,
through conftest's ``pytest_xdist_make_scheduler``) hands out whole groups. A fixture asked for
at run time (``request.getfixturevalue("lab")``) is found in the source of the test and of its
fixtures; should one ever escape that reading, ``only_once`` says so: an expensive session
fixture calls it, and a second worker that sets one up fails its test.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from deploy import procs

PER_WORKER = frozenset({"ray_cluster"})
ASKED = re.compile(r"""getfixturevalue\(\s*["'](\w+)["']\s*\)""")


class _Components:
    """Union-find over names: "fixture:NAME", "module-fixture:PATH::NAME", "module:PATH"."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def join(self, first: str, second: str) -> None:
        self.parent[self.find(first)] = self.find(second)


VENV = Path(sys.prefix).resolve()


@functools.cache
def _source(function: Any) -> Path | None:
    try:
        return Path(inspect.getfile(function)).resolve()
    except (OSError, TypeError):
        return None


def _ours(definition: Any, root: Path) -> bool:
    """A fixture of this suite's: defined under the run's root directory, not in the venv
    (pytest's own tmp_path_factory, a plugin's)."""
    source = _source(definition.func)
    return source is not None and source.is_relative_to(root) and not source.is_relative_to(VENV)


@functools.cache
def _asked_at_run_time(function: Any) -> tuple[str, ...]:
    try:
        return tuple(ASKED.findall(inspect.getsource(function)))
    except (OSError, TypeError):
        return ()


def fixtures_by_scope(item: pytest.Item) -> dict[str, set[str]]:
    """The names of this suite's session and module fixtures that ``item`` sets up, directly
    or through others, by scope; not those of ``PER_WORKER``."""
    manager = item.session._fixturemanager
    root = item.config.rootpath.resolve()
    seen: set[str] = set()
    found: dict[str, set[str]] = {"session": set(), "module": set()}
    todo = list(getattr(item, "fixturenames", ()))
    todo += _asked_at_run_time(getattr(item, "obj", None))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for definition in manager.getfixturedefs(name, item) or ():
            if not _ours(definition, root):
                continue
            if name not in PER_WORKER:
                found.get(definition.scope, set()).add(name)
            todo += [*definition.argnames, *_asked_at_run_time(definition.func)]
    return found


def groups(items: Iterable[pytest.Item]) -> dict[str, str]:
    """A group name for each test's nodeid. A test that sets up a shared fixture joins the
    group of that fixture, with its module's tests that share a module fixture with it; the
    other tests of a module are a group of their own, as ``--dist loadscope`` has them."""
    components = _Components()
    first: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        used = fixtures_by_scope(item)
        nodes = [f"fixture:{name}" for name in sorted(used["session"])]
        nodes += [f"module-fixture:{module}::{name}" for name in sorted(used["module"])]
        if not used["session"]:
            nodes.append(f"module:{module}")
        first[item.nodeid] = nodes[0]
        for node in nodes:
            components.join(node, nodes[0])
    members: dict[str, list[str]] = {}
    for node in list(components.parent):
        members.setdefault(components.find(node), []).append(node)

    def name_of(root: str) -> str:
        fixtures = sorted(n.removeprefix("fixture:") for n in members[root]
                          if n.startswith("fixture:"))
        if fixtures:
            return "shared:" + ",".join(fixtures)
        return min(n.split(":", 1)[1].split("::")[0] for n in members[root])

    return {nodeid: name_of(components.find(node)) for nodeid, node in first.items()}


GROUPS = "BISECT_TEST_GROUPS"  # the file where workers leave the groups for the controller
XDIST = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def configure(config: pytest.Config) -> None:
    """On the controller of ``--dist loadgroup``: a file for the groups, named to the workers
    (they start after this, with this environment). A pytest that is no worker, but inherited
    a worker's environment (test_interrupted_run.py's children), forgets it."""
    if hasattr(config, "workerinput"):
        return
    for name in (*XDIST, GROUPS):
        os.environ.pop(name, None)
    if config.getoption("dist", "no") == "loadgroup":
        os.environ[GROUPS] = str(Path(tempfile.mkdtemp(prefix="bisect-groups-")) / "groups.json")


def unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and GROUPS in os.environ:
        shutil.rmtree(Path(os.environ.pop(GROUPS)).parent, ignore_errors=True)


# What a test weighs when groups are ordered: a real one starts processes or waits on sockets
# (tenths of a second to a minute), a pure one takes milliseconds.
REAL_WEIGHT, PURE_WEIGHT = 1.0, 0.02


class Marked(Protocol):
    """What ``heaviest_first`` reads of a test: a ``pytest.Item``, or a test's stand-in."""

    @property
    def nodeid(self) -> str: ...

    def get_closest_marker(self, name: str) -> object | None: ...


MarkedItem = TypeVar("MarkedItem", bound=Marked)


def heaviest_first(items: list[MarkedItem], named: dict[str, str]) -> list[MarkedItem]:
    """``items`` with the groups that weigh most first, each group's tests in their order: the
    scheduler hands groups out in this order, so the long ones do not start last and leave
    one worker running them alone."""
    weight: defaultdict[str, float] = defaultdict(float)
    for item in items:
        real = item.get_closest_marker("real") is not None
        weight[named[item.nodeid]] += REAL_WEIGHT if real else PURE_WEIGHT
    # a stable sort (reversed too): groups of equal weight keep their order
    ranked = sorted(weight, key=weight.__getitem__, reverse=True)
    rank = {group: n for n, group in enumerate(ranked)}
    return sorted(items, key=lambda item: rank[named[item.nodeid]])


def publish(items: list[pytest.Item]) -> None:
    """On a worker: its groups into the controller's file (each worker collects the same tests
    and finds the same groups; written whole, by a rename), and its tests in the order the
    groups are to be handed out (``heaviest_first``)."""
    path = os.environ.get(GROUPS)
    if path is None or os.environ.get("PYTEST_XDIST_WORKER") is None:
        return
    named = groups(items)
    items[:] = heaviest_first(items, named)
    partial = Path(f"{path}.{os.environ['PYTEST_XDIST_WORKER']}")
    partial.write_text(json.dumps(named))
    partial.rename(path)


def scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduling by scopes, a scope being a group. xdist's own ``loadgroup`` reads
    ``xdist_group`` marks into the node id, which pytest 9 no longer lets a plugin rewrite. The
    groups go out in the workers' order of collection (``publish``), not xdist's (most tests
    first: a parser table's milliseconds before a lab's minutes). A worker that dies fails the
    test it was running, and its replacement, once it has collected, takes the rest of its
    groups: xdist 3.8's own scheduling by scopes would run that test again, and hand work to a
    replacement still collecting (INTERNALERROR ``KeyError: <WorkerController gw2>``)."""
    from xdist.scheduler import LoadScopeScheduling
    from xdist.workermanage import WorkerController

    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):
        named: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.named is None:  # every worker has collected (and published) by now
                self.named = json.loads(Path(os.environ[GROUPS]).read_text())
            return self.named[nodeid]

        def _reschedule(self, node: WorkerController) -> None:
            if node not in self.registered_collections:
                return  # xdist's replacement of a dead worker, still collecting: schedule() waits
            super()._reschedule(node)
            # A worker runs a test once it knows the next one, or that none comes. A replacement
            # handed a group of one test left would wait there: a second group, or the stop.
            if self._pending_of(self.assigned_work[node]) < 2:
                super()._reschedule(node)

        def remove_node(self, node: WorkerController) -> str | None:
            """xdist's, but the test the node died on is not run again: it is reported as failed
            (the worker crashed on it), and a rerun could take its replacement down too (a
            test that kills its worker's Ray). A group of tests all done does not go back
            either: it would go out as an empty list of tests, which a worker never answers."""
            workload = self.assigned_work.pop(node)
            left = [nodeid for unit in workload.values() for nodeid, done in unit.items()
                    if not done]
            if not left:
                return None
            crashed = left[0]  # a worker runs its groups, and their tests, in the order sent
            workload[self._split_scope(crashed)][crashed] = True
            self.workqueue.update((scope, unit) for scope, unit in workload.items()
                                  if not all(unit.values()))
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

    return GroupScheduling(config, log)


def only_once(factory: pytest.TempPathFactory, fixture: str) -> None:
    """Fail if another worker of this run set ``fixture`` up already and lives: its tests were
    not kept on one worker (``groups`` missed one). A worker that died left the rest of its
    groups to its replacement, which sets the fixture up anew (what the dead one started, its
    reaper stops). Without xdist, nothing to check."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    # the run's base directory, above each worker's own (pytest-N/popen-gwK)
    mark = Path(factory.getbasetemp()).parent / f"set-up-once-{fixture}"
    mine = mark.with_name(f"{mark.name}.{worker}")
    mine.write_text(f"{os.getpid()} {procs.start_time(os.getpid())}")
    try:
        os.link(mine, mark)  # the mark appears with its holder in it, or not at all
    except FileExistsError:
        pid, start = (int(field) for field in mark.read_text().split())
        if procs.alive(pid) and procs.start_time(pid) == start:  # not a later one on its pid
            pytest.fail(f"{fixture} is set up a second time, on {worker}: a test that needs it "
                        "was not grouped with the others (tests/support/workers.py)")
        os.replace(mine, mark)
    finally:
        mine.unlink(missing_ok=True)
