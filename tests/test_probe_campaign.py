"""`bisect run` with the user's own probe, as `git bisect run`: real twins restarted per variant,
Ray pool actors, a SQLite store, a probe script in the campaign's directory judged by its exit
status; its output stored and shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from db.store import Store
from experiments.campaign import Campaign
from orchestrator.cli import app
from orchestrator.demo import twin_pool
from orchestrator.executor.driver import RunFailed, run_campaign
from orchestrator.stored import create_campaign
from tests.support.git_trees import git, new_tree

pytestmark = pytest.mark.real

NO_FAULTS: dict[str, Any] = {"rules": []}
BISECT = str(Path(sys.executable).parent / "bisect")

# Asks the deployed server itself (its /get_server_info) whether HiCache is on: bad when it is.
# It checks what it is told of the variant against what runs, and says where it ran.
ASKS_THE_SERVER = f"""#!{sys.executable}
import json, os, sys, urllib.request
info = json.load(urllib.request.urlopen(os.environ["BISECT_ENDPOINT"] + "/get_server_info"))
hicache = bool(info.get("enable_hierarchical_cache"))
print("variant", os.environ["BISECT_VARIANT"], "run", os.environ["BISECT_RUN"], "of",
      os.environ["BISECT_RUNS"], "in", os.getcwd(), "args", sys.argv[1:])
if os.environ["BISECT_LEVEL_HICACHE"] != ("on" if hicache else "off"):
    sys.exit(99)  # told one variant, another runs: a bad answer the verdict would show
print("hicache on: the bug" if hicache else "clean", file=sys.stderr)
sys.exit(1 if hicache else 0)
"""


def probe(directory: Path, text: str, name: str = "probe.py") -> None:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)


def campaign_data(tmp_path: Path, workload: dict[str, Any], **more: Any) -> dict[str, Any]:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(NO_FAULTS))
    return {
        "name": "own probe",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", faults, latency_ms=1)],
        "factors": [
            {"name": "hicache", "levels": {"off": {}, "on": {
                "flags": ["--enable-hierarchical-cache"]}}},
            {"name": "index_k", "levels": {"fp8": {"env": {"BF16_INDEX_K": 0}},
                                           "bf16": {"env": {"BF16_INDEX_K": 1}}}},
        ],
        "workload": workload,
        "strategy": {"kind": "factorial", "repeats": 2},
        **more,
    }


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bisect_run_with_a_probe_names_the_culprit_and_keeps_its_output(
        tmp_path: Path, on_shared_ray: dict[str, str]) -> None:
    probe(tmp_path, ASKS_THE_SERVER)
    path = write(tmp_path, campaign_data(tmp_path, {"command": ["./probe.py", "--fast"],
                                                    "runs": 4}))
    db = tmp_path / "bisect.db"
    # the real console script, from another directory: the probe still runs from the
    # campaign file's (on the test run's Ray: its pool actor's directory is not the file's)
    result = subprocess.run([BISECT, "run", str(path), "--store", str(db), "--json"],
                            cwd="/", env={**os.environ, **on_shared_ray},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"hicache": "on"}]
    assert verdict["cost"]["trials"] == 8 and verdict["cost"]["sessions"] == 32

    # what it stored, read back through the real console script
    shown = subprocess.run([BISECT, "show", "last", "--store", str(db), "--json"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    trials = json.loads(shown.stdout)
    # A trial that met an infrastructure fault (seen once on a loaded machine) is stored as
    # failed and run again; any other failure is this test's to show.
    retried = [t for t in trials if t["status"] != "done"]
    assert all(t["status"] == "failed" and t["failure"] == "infrastructure" for t in retried), \
        [(t["seq"], t["status"], t["failure"], t["error"]) for t in retried]
    trials = [t for t in trials if t["status"] == "done"]
    assert len(trials) == 8
    for trial in trials:
        bad = trial["levels"]["hicache"] == "on"
        assert trial["counts"] == ({"probe_failed": 4} if bad else {"ok": 4})
        assert [r["exit_code"] for r in trial["probe"]] == [1 if bad else 0] * 4
        first = trial["probe"][0]["output"]
        assert first.startswith(f"exit {1 if bad else 0} after ")
        assert f"in {tmp_path.resolve()} args ['--fast']" in first  # the campaign's directory
        assert ("hicache on: the bug" if bad else "clean") in first  # stderr too
        assert trial["performance"] is None  # no throughput of a probe
        assert [s["name"] for s in trial["steps"]][-2:] == ["probe", "collect"]

    text = subprocess.run([BISECT, "show", "last", "--store", str(db), "--output"],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "run 4: bad, exit 1 after" in text.stdout and "    hicache on: the bug" in text.stdout


def test_a_probe_that_exits_125_skips_the_variant_never_judging_it(
        ray_cluster: None, tmp_path: Path) -> None:
    probe(tmp_path, "#!/bin/sh\necho \"cannot test $BISECT_VARIANT\"\n"
                    "[ \"$BISECT_LEVEL_HICACHE\" = on ] && exit 125\nexit 0\n", "probe.sh")
    data = campaign_data(tmp_path, {"command": "./probe.sh"})
    data["factors"] = data["factors"][:1]
    data["known_good"], data["known_bad"] = {"hicache": "off"}, {"hicache": "on"}
    data["strategy"] = {"kind": "adaptive", "max_trials": 12}
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(write(tmp_path, data)), "--store", str(db),
                                      "--json"])
    verdict = json.loads(result.stdout)
    assert result.exit_code == 3, result.output  # the known-bad variant cannot be judged
    assert verdict["status"] == "inconclusive"
    assert [u["levels"] for u in verdict["unresolvable"]] == [{"hicache": "on"}]
    assert "the probe exited 125" in verdict["unresolvable"][0]["error"]
    shown = json.loads(CliRunner().invoke(app, ["show", "last", "--store", str(db),
                                                "--json"]).stdout)
    skipped = [t for t in shown if t["levels"] == {"hicache": "on"}]
    assert skipped and all(t["status"] == "failed" and t["failure"] == "variant"
                           and t["skipped"] and t["counts"] == {} for t in skipped)
    assert skipped[0]["probe"][0]["output"] == "exit 125 after " + skipped[0]["probe"][0][
        "status"].split(" after ")[1] + "\ncannot test hicache=on\n"
    text = CliRunner().invoke(app, ["show", "last", "--store", str(db)]).stdout
    assert "skipped hicache=on (2 attempts): the probe skipped it (exit 125)" in text
    # the reason names it for what it is: skipped by the probe, not a deploy that failed
    assert verdict["reason"] == ("cannot go on: known-bad hicache=on is unresolvable: the probe "
                                 "skipped it (exit 125)")


# Bad with HiCache on; it cannot test HiCache off with bf16 index keys (exit 125, as `git
# bisect skip`): the very flip that would clear index_k.
SKIPS_ONE = """#!/bin/sh
echo "variant $BISECT_VARIANT"
if [ "$BISECT_LEVEL_HICACHE" = off ] && [ "$BISECT_LEVEL_INDEX_K" = bf16 ]; then
  echo "cannot build this one"; exit 125
fi
[ "$BISECT_LEVEL_HICACHE" = on ] && exit 1
exit 0
"""


def test_a_variant_the_probe_skips_leaves_the_search_going_on_to_the_culprit(
        ray_cluster: None, tmp_path: Path) -> None:
    # Issue 27, item 5: one skip no longer ends an adaptive campaign. The skipped variant is
    # unresolvable after its attempts, never judged; the search goes on with the others
    # (delta debugging instead of the flip) and names the culprit, confirmed.
    probe(tmp_path, SKIPS_ONE, "probe.sh")
    data = campaign_data(tmp_path, {"command": "./probe.sh", "runs": 4})
    data["known_good"] = {"hicache": "off", "index_k": "fp8"}
    data["known_bad"] = {"hicache": "on", "index_k": "bf16"}
    # Its budget of 3 trials stops it short (`inconclusive`, exit 3, with the resume that runs
    # on); `bisect resume --max-trials 16` goes on from those 3 trials to the culprit.
    data["strategy"] = {"kind": "adaptive", "max_trials": 3}
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(write(tmp_path, data)), "--store", str(db),
                                      "--json"])
    assert result.exit_code == 3, result.output
    assert json.loads(result.stdout)["reason"] == (
        "trial budget of 3 spent; still open: reproduce (hicache=off,index_k=fp8: 0 of 4 "
        "sessions corrupt in 1 trial)")
    campaign_id = json.loads(result.stdout)["campaign"]
    assert f"next: bisect resume {campaign_id} --store {db} --max-trials 6    # the budget " \
        "is spent: run on from these trials" in result.stderr
    result = CliRunner().invoke(app, ["resume", "last", "--store", str(db), "--json",
                                      "--max-trials", "16"])
    assert result.exit_code == 0, result.output
    assert "budget raised: strategy.max_trials: 3 -> 16" in result.stderr
    assert "next:" not in result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit", verdict["reason"]
    assert [c["factors"] for c in verdict["culprits"]] == [{"hicache": "on"}]
    assert verdict["reason"] == ("corruption follows hicache=on (found past 1 skipped "
                                 "variant(s), as `git bisect skip`)")
    skipped = {"hicache": "off", "index_k": "bf16"}
    assert [u["levels"] for u in verdict["unresolvable"]] == [skipped]
    assert verdict["unresolvable"][0]["error"].startswith("the probe exited 125")
    assert skipped not in [v["levels"] for v in verdict["variants"]]  # never judged
    said = [s for s in verdict["log"] if s["answer"] == "skipped"]
    assert said and all(s["levels"] == skipped and s["reason"] == "the probe skipped it "
                        "(exit 125)" for s in said)
    shown = json.loads(CliRunner().invoke(app, ["show", "last", "--store", str(db),
                                                "--json"]).stdout)
    tried = [t for t in shown if t["levels"] == skipped]
    assert len(tried) == 2 and all(t["status"] == "failed" and t["counts"] == {}
                                   for t in tried)
    log = CliRunner().invoke(app, ["log", "last", "--store", str(db)]).stdout
    assert "the probe skipped it (exit 125)" in log and "its trials failed" not in log


def buggy_history(tree: Path, commits: int, first_bad: int) -> list[str]:
    """A tree whose file CHANGES says ``bug`` from commit ``first_bad`` on."""
    new_tree(tree)
    shas = []
    for index in range(commits):
        (tree / "CHANGES").write_text(f"change {index}{' bug' if index >= first_bad else ''}\n")
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", f"change {index}")
        shas.append(git(tree, "rev-parse", "HEAD"))
    return shas


# git bisect run's kind of probe: it reads the checked-out tree (and checks that it is the
# commit it is told of).
READS_THE_TREE = """#!/bin/sh
cd "$1" || exit 200
[ "$(git rev-parse HEAD | cut -c1-12)" = "$BISECT_LEVEL_COMMIT" ] || exit 99
grep -q bug CHANGES && { echo "bug at $BISECT_LEVEL_COMMIT"; exit 1; }
exit 0
"""


def test_bisect_run_with_a_probe_finds_the_first_bad_commit(ray_cluster: None,
                                                            tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shas = buggy_history(tree, commits=10, first_bad=6)
    probe(tmp_path, READS_THE_TREE, "probe.sh")
    data = campaign_data(tmp_path, {"command": ["./probe.sh", str(tree)], "runs": 2},
                         commits={"tree": str(tree), "good": shas[0], "bad": shas[-1]})
    data["factors"], data["strategy"] = [], {"kind": "commits"}
    db = tmp_path / "bisect.db"
    result = CliRunner().invoke(app, ["run", str(write(tmp_path, data)), "--store", str(db),
                                      "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"commit": shas[6][:12]}]
    assert verdict["cost"]["trials"] < 12
    assert git(tree, "rev-parse", "HEAD") == shas[-1]  # the tree is left as found


@pytest.mark.parametrize(("script", "says"), [
    pytest.param("#!/bin/sh\necho about to die\nkill -9 $$\n", "killed by SIGKILL", id="killed"),
    pytest.param("#!/bin/sh\necho hanging\nexec sleep 60\n", "ran past its timeout",
                 id="timeout"),
    pytest.param(None, "could not start", id="missing"),
])
def test_a_probe_killed_or_missing_is_the_tools_error_never_bad(
        ray_cluster: None, tmp_path: Path, script: str | None, says: str) -> None:
    if script is not None:
        probe(tmp_path, script, "probe.sh")
    data = campaign_data(tmp_path, {"command": ["./probe.sh"], "timeout_s": 0.5,
                                    "cwd": str(tmp_path)})
    campaign = Campaign.model_validate(data)  # as stored: a probe gone since it was validated
    with Store.open(str(tmp_path / "bisect.db")) as store:
        campaign_id = create_campaign(store, campaign, "test")
        with pytest.raises(RunFailed, match="3 infrastructure failures, the last: the probe "):
            run_campaign(store, campaign_id)
        trials = store.trials(campaign_id, status=None)
        assert len(trials) == 3
        assert all(t.status == "failed" and t.failure == "infrastructure"
                   and says in (t.error or "") and not t.counts
                   for t in trials)  # no session: nothing judged bad
        step = next(s for s in store.steps(trials[0].id) if s.name == "probe")
        assert step.outcome == "failed" and step.details["runs"][0]["judgement"] == "error"
        if script is not None:
            assert script.split("echo ")[1].split("\n")[0] in step.details["output"]
