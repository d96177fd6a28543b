"""One demo per test run, from the built wheel: ``demo`` builds it, installs it into a fresh venv
and runs `bisect demo --json` there, away from the source tree, as a newcomer would; the
packaging test (test_packaging.py) and the CLI tests on the demo's store (test_cli_demo.py) read
the same run. conftest imports the fixture.

The wheel is installed without its dependencies: the fresh venv sees this venv's installed
packages through a path file (a plain path line: the site directory's own path files, the
editable install of the source tree among them, are not run), and its own site-packages, with
the wheel's files, come first. pip resolving the same requirements from the same wheels is what
`make` did for this venv; installing them again cost ~20 s of a 2-core CI run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import workers

REPO = Path(__file__).resolve().parents[2]


def strict(text: str) -> Any:
    """JSON as JavaScript and Go read it: NaN and Infinity are errors, not numbers."""
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@dataclass(frozen=True)
class Demo:
    venv: Path  # the fresh venv the wheel went into
    program: str  # its `bisect`
    cwd: Path
    env: dict[str, str]
    campaign_id: str
    document: dict[str, Any]
    stderr: str

    def bisect(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.program, *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert done.returncode == 0, (args, done.stderr[-2000:])
        return done


def install_wheel(where: Path) -> Path:
    """Build the wheel from the source tree and install it alone into a fresh venv at
    ``where``; the venv's python."""
    dist = where / "dist"
    # pip must not take the source tree on PYTHONPATH (and the egg-info a build leaves in it)
    # for the installed package
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
                    str(dist), str(REPO)], check=True, cwd=where, env=clean)
    [wheel] = dist.glob("bisect_serving-*.whl")
    env_dir = where / "venv"
    venv.EnvBuilder().create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                    "--quiet", str(wheel)], check=True, cwd=where, env=clean)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return python


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """`bisect demo --json` of the installed wheel, run once, in a directory of its own."""
    workers.only_once(tmp_path_factory, "demo")
    python = install_wheel(tmp_path_factory.mktemp("wheel"))
    cwd = tmp_path_factory.mktemp("newcomer")
    # Ray's socket paths must stay under 108 bytes: a short private directory of its own.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # the newcomer's venv has no SGLang: leaks judged by the built-in parser
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "COLUMNS": "200", "BISECT_TRIAGE": "builtin"}
    for name in ("BISECT_STORE", "PYTHONPATH"):  # only the wheel's files can be imported
        env.pop(name, None)
    program = str(python.parent / "bisect")
    done = subprocess.run([program, "demo", "--json"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    document = strict(done.stdout)  # exactly one document on stdout
    yield Demo(python.parent.parent, program, cwd, env, document["campaign"], document,
               done.stderr)
    shutil.rmtree(ray_tmp, ignore_errors=True)
