"""The built wheel works on its own: templates and migrations ship inside it. The demo that
proves it is the run's one demo (tests/support/demo.py), read by test_cli_demo.py too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.demo import Demo

pytestmark = pytest.mark.real


def test_wheel_installs_into_a_fresh_venv_and_runs_the_demo(demo: Demo) -> None:
    help_run = subprocess.run([demo.program, "--help"], capture_output=True, text=True,
                              cwd=demo.cwd, env=demo.env, check=False)
    assert help_run.returncode == 0 and "demo" in help_run.stdout
    verdict = demo.document
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"index_k": "bf16", "hicache": "on"}]
    assert (demo.cwd / "bisect-demo" / "report.html").is_file()
    # Away from the source tree, only the wheel's files are imported: the package, its
    # templates and migrations, and the twin the demo ran.
    where = subprocess.run([str(demo.venv / "bin" / "python"), "-c",
                            "import db, templates, experiments.twin, orchestrator; "
                            "print(db.__file__, templates.__file__, experiments.twin.__file__, "
                            "orchestrator.__file__, sep='\\n')"],
                           capture_output=True, text=True, cwd=demo.cwd, env=demo.env,
                           check=True)
    files = [Path(line) for line in where.stdout.split()]
    assert len(files) == 4 and all(f.is_relative_to(demo.venv) for f in files), where.stdout
    assert list(files[1].parent.glob("*.html.j2")), "no template in the wheel"
    assert list((files[0].parent / "migrations" / "versions").glob("*.py")), "no migration"
