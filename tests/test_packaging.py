"""The built wheel works on its own: templates and migrations ship inside it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.real


def test_wheel_installs_into_a_fresh_venv_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(REPO)],
        check=True, cwd=tmp_path,
    )
    [wheel] = dist.glob("bisect_serving-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, cwd=tmp_path)
    bisect = str(env_dir / "bin" / "bisect")
    # Run away from the source tree, so only the wheel's files can be imported.
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    # Ray's socket paths must stay under 108 bytes: a short private directory of its own.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    env.pop("PYTHONPATH", None)
    help_run = subprocess.run([bisect, "--help"], capture_output=True, text=True, cwd=workdir,
                              env=env, check=False)
    assert help_run.returncode == 0 and "demo" in help_run.stdout
    demo = subprocess.run([bisect, "demo", "--json"], capture_output=True, text=True,
                          cwd=workdir, env=env, timeout=300, check=False)
    assert demo.returncode == 0, demo.stderr[-3000:]
    verdict = json.loads(demo.stdout)  # exactly one JSON document on stdout
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert (workdir / "bisect-demo" / "report.html").is_file()
    where = subprocess.run([str(python), "-c", "import db, templates; print(db.__file__)"],
                           capture_output=True, text=True, cwd=workdir, env=env, check=True)
    assert str(env_dir) in where.stdout
    shutil.rmtree(ray_tmp, ignore_errors=True)
