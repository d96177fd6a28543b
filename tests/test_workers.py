"""`make test`'s two workers (tests/support/workers.py): a child pytest under xdist, on a small
suite of its own, keeps the tests of a shared session fixture on one worker, spreads the rest
(those on a fixture that each worker sets up for itself too), and fails the test that sets a
shared fixture up on a second worker (one asked for by a name that the grouping cannot read). A
worker that dies fails the test it was running, and the run goes on without running it again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real
REPO = Path(__file__).resolve().parent.parent

CONFTEST = '''
import json, os, time
import pytest
from tests.support import workers

def pytest_configure(config):
    workers.configure(config)

def pytest_unconfigure(config):
    workers.unconfigure(config)

def pytest_collection_modifyitems(items):
    workers.publish(items)
    with open(os.environ["GROUPS"], "w") as out:  # each worker's, all alike
        json.dump(workers.groups(items), out)
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw3":
        # the second replacement collects once the first runs tests, as the suite's seconds of
        # collection let it: a scheduler must not hand work to a worker still collecting
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and '"gw2"' not in ran():
            time.sleep(0.05)

def ran():
    return open(os.environ["RAN"]).read() if os.path.exists(os.environ["RAN"]) else ""

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return workers.scheduler(config, log)

@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    workers.only_once(tmp_path_factory, "shared")

@pytest.fixture(scope="session")
def ray_cluster():  # workers.PER_WORKER: each worker's own
    return "this worker's"

@pytest.fixture(scope="session")
def hidden(tmp_path_factory):
    workers.only_once(tmp_path_factory, "hidden")

@pytest.fixture(autouse=True)
def where(request):
    yield
    with open(os.environ["RAN"], "a") as out:
        out.write(json.dumps([request.node.nodeid, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
'''
# a: the fixture by argument; b: asked for at run time, by a fixture; c..f: free modules, c and d
# on a fixture each worker sets up for itself (``ray_cluster``); g and h: "hidden", by a name
# built at run time, which the grouping cannot see. g and h hold the most tests: xdist hands the
# largest groups out first, one to each worker.
MODULES = {
    "test_a.py": "def test_one(shared): pass\ndef test_two(shared): pass\n",
    "test_b.py": ("import pytest\n@pytest.fixture\ndef through(request):\n"
                  "    return request.getfixturevalue('shared')\n"
                  "def test_one(through): pass\ndef test_two(through): pass\n"),
    **{f"test_{m}.py": "def test_one(ray_cluster): pass\ndef test_two(): pass\n" for m in "cd"},
    **{f"test_{m}.py": "def test_one(): pass\ndef test_two(): pass\n" for m in "ef"},
    **{f"test_{m}.py": "def test_one(request): request.getfixturevalue('hid' + 'den')\n"
       + "".join(f"def test_{n}(): pass\n" for n in range(2, 7)) for m in "gh"},
}


def run_suite(tmp_path: Path, modules: dict[str, str]) -> tuple[
        subprocess.CompletedProcess[str], dict[str, str]]:
    """A child pytest on two workers over ``modules`` with CONFTEST: what it printed, and the
    worker that ran each test (to its teardown)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text(CONFTEST)
    for name, text in modules.items():
        (suite / name).write_text(text)
    ran = tmp_path / "ran.jsonl"
    env = {**os.environ, "RAN": str(ran), "GROUPS": str(tmp_path / "groups.json"),
           "PYTHONPATH": os.pathsep.join([str(REPO), *os.environ.get("PYTHONPATH", "")
                                          .split(os.pathsep)]).rstrip(os.pathsep)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-q", str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = ran.read_text().splitlines() if ran.exists() else []
    return done, dict(tuple(json.loads(line)) for line in lines)


def test_shared_fixtures_stay_on_one_worker_and_a_second_set_up_fails(tmp_path: Path) -> None:
    done, worker = run_suite(tmp_path, MODULES)
    group = json.loads((tmp_path / "groups.json").read_text())
    assert {group[f"test_{m}.py::test_{n}"] for m in "ab" for n in ("one", "two")} == {
        "shared:shared"}, group  # though b asks for it at run time
    assert [group[f"test_{m}.py::test_one"] for m in "cdefgh"] == [
        f"test_{m}.py" for m in "cdefgh"], group  # each module alone, c and d on their Ray too
    assert len(worker) == 24, done.stdout[-3000:]
    sharing = {worker[f"test_{m}.py::test_{n}"] for m in "ab" for n in ("one", "two")}
    assert len(sharing) == 1, worker  # a and b on one worker
    assert set(worker.values()) == {"gw0", "gw1"}, worker  # the rest spread
    # g and h cannot be seen to share: each worker sets "hidden" up, and the second fails
    assert worker["test_g.py::test_one"] != worker["test_h.py::test_one"], worker
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed, 23 passed" in done.stdout, done.stdout[-3000:]
    assert "hidden is set up a second time" in done.stdout, done.stdout[-3000:]


DIES = "import os, signal\ndef test_dies(): os.kill(os.getpid(), signal.SIGKILL)\n"
AFTER = "def test_after(): pass\n"
ONE = "def test_one(): pass\n"
SHARED = "import pytest\n@pytest.fixture(autouse=True)\ndef on_shared(shared): pass\n"
# Two groups of two tests, then two of one: each worker is handed a group of two first, then one
# of one, and with that every test is out. In "both": the two groups of two each kill the
# worker that runs them, and two replacements collect at once, the second only once the first
# runs tests; a's tests share the session fixture "shared", which a replacement sets up again
# (``only_once`` lets it, the worker that set it up being dead). In "one": the replacement gets
# the dead worker's last test of its group and the group of one that it held, while the other
# worker, every test handed out, is stopping.
CRASHES = {
    "both": {"test_a.py": SHARED + DIES + AFTER, "test_b.py": DIES + AFTER, "test_c.py": ONE,
             "test_d.py": ONE},
    "one": {"test_a.py": DIES + AFTER, "test_b.py": ONE + "def test_two(): pass\n",
            "test_c.py": ONE, "test_d.py": ONE},
}


@pytest.mark.parametrize("crashes", sorted(CRASHES))
def test_a_dead_worker_fails_its_test_and_the_run_goes_on(tmp_path: Path, crashes: str) -> None:
    modules = CRASHES[crashes]
    done, worker = run_suite(tmp_path, modules)
    output = done.stdout + done.stderr
    assert "INTERNALERROR" not in output, output[-3000:]
    dead = [name for name, text in modules.items() if DIES in text]
    for name in dead:  # xdist's report of a crash, once: the test is not run again
        assert f"crashed while running '{name}::test_dies'" in output, output[-3000:]
        assert output.count(f"FAILED {name}::test_dies") == 1, output[-3000:]
    tests = {f"{name}::{test}" for name, text in modules.items()
             for test in re.findall(r"def (test_\w+)", text)}
    assert set(worker) == tests - {f"{name}::test_dies" for name in dead}, output[-3000:]
    # the summary: pytest's own last line, in full
    assert done.stdout.splitlines()[-1].startswith(
        f"{len(dead)} failed, {len(worker)} passed in "), done.stdout[-3000:]
    assert done.returncode == 1, output[-3000:]
