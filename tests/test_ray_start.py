"""Ray that does not start is a named failure of the run, and the campaign resumes (issue 26,
item 5).

Ray timing out at start-up under load used to end `bisect run` with a bare ``Exception:`` and
leave the campaign ``running``. Here Ray's start really fails: ``RAY_gcs_server_port_wait_time_s
=0`` gives its wait for the GCS no time, so ``ray.init`` raises its start-up timeout. The run
must say so in one sentence, mark the campaign interrupted, print the resume command, exit 1;
that command, run with Ray able to start (the test run's own, joined: what is tested is that
the campaign goes on, not a second start), finishes the campaign.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from db.store import Store
from tests.conftest import free_port
from tests.support.fault_campaigns import campaign, twin_service

pytestmark = pytest.mark.real

BISECT = str(Path(sys.executable).parent / "bisect")


def test_ray_that_does_not_start_interrupts_the_campaign_and_resume_finishes_it(
        tmp_path: Path, environment: dict[str, str], on_shared_ray: dict[str, str]) -> None:
    port = free_port()
    pool = {"name": "p0", "endpoint": f"http://127.0.0.1:{port}",
            "services": [twin_service(port)]}
    spec = campaign(tmp_path, [pool], name="ray-start",
                    workload={"sessions": 2, "rounds": 1})
    path = tmp_path / "campaign.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    failed = subprocess.run(
        [BISECT, "run", str(path), "--store", "bisect.db"], cwd=tmp_path, capture_output=True,
        text=True, timeout=300, check=False,
        env={**environment, "RAY_gcs_server_port_wait_time_s": "0"})
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr and "Exception:" not in failed.stderr
    stored = re.search(r"^campaign (\S+):", failed.stderr, re.M)
    assert stored is not None, failed.stderr
    campaign_id = stored[1]
    [said] = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert re.match(r"error: Ray did not start within \d+\.\d s: \S", said), said
    assert said.endswith(f"(`bisect resume {campaign_id}` retries)"), said
    with Store.open(str(tmp_path / "bisect.db"), create=False) as store:
        assert store.get_campaign(campaign_id).status == "interrupted"
        assert store.trials(campaign_id, status=None) == []

    resumed = subprocess.run([BISECT, "resume", campaign_id, "--store", "bisect.db"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             check=False, env={**environment, **on_shared_ray})
    assert resumed.returncode in (0, 3), resumed.stderr[-3000:]  # 3: inconclusive, one trial
    with Store.open(str(tmp_path / "bisect.db"), create=False) as store:
        assert store.get_campaign(campaign_id).status == "done"
        assert len(store.trials(campaign_id)) == 2
