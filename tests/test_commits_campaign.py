"""`bisect commits`: the first bad commit of a real git range, deployed commit by commit."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo import twin_pool
from tests.support.git_trees import commits_campaign, git, new_tree

pytestmark = pytest.mark.real


def history(tree: Path, commits: int, first_bad: int, broken: Collection[int] = (),
            authors: Mapping[int, str] | None = None, effect: str = "leak") -> list[str]:
    """A tree whose fault model turns bad at commit ``first_bad`` (0 is the good one), with
    ``effect``; the commits in ``broken`` carry a file BROKEN, which makes the campaign's build
    step fail. Commit i's subject is ``subject_of(i)``; its author ``t`` unless ``authors``
    names another."""
    new_tree(tree)
    shas = []
    for index in range(commits):
        probability = 0.5 if index >= first_bad else 0.0
        (tree / "faults.yaml").write_text(yaml.safe_dump({"rules": [{
            "name": "race", "when": {"flags": {"enable-hierarchical-cache": True}},
            "min_inflight": 1, "probability": probability, "effect": effect}]}))
        (tree / "CHANGES").write_text(f"change {index}\n")
        (tree / "BROKEN").unlink(missing_ok=True)
        if index in broken:
            (tree / "BROKEN").write_text("half a refactoring\n")
        git(tree, "add", "-A")
        git(tree, "-c", f"user.name={(authors or {}).get(index, 't')}", "commit", "-qm",
            subject_of(index))
        shas.append(git(tree, "rev-parse", "HEAD"))
    return shas


def subject_of(index: int) -> str:
    """A hostile subject for the first bad commit of the tests' ranges (7): markup and a
    terminal escape, which the report and the terminal must show as text."""
    if index == 7:
        return "Fix <script>alert('topk')</script> & \x1b[31mkernel"
    return f"change {index}"


def test_commits_finds_the_first_bad_commit(ray_cluster: None, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    shas = history(tree, commits=12, first_bad=7, authors={7: "Jane \"JD\" O'Doe & co"})
    path = commits_campaign(tmp_path, tree)
    db = tmp_path / "bisect.db"
    runner = CliRunner()
    # One draw, always the same: how many trials the search takes depends on the sessions its
    # draw sends (the twin's hits are a hash of each session's key). Simulated with the twin's
    # own draws over 120 run seeds, it took 9 to 14 trials, 12 or more for 12 seeds (a last
    # good commit whose clean trials count at the restart prior's design effect is re-run);
    # this one takes 10, at any load (no session comes near its timeout).
    result = runner.invoke(app, ["commits", str(path), "--good", shas[0], "--bad", shas[-1],
                                 "--store", str(db), "--json", "--seed", "1"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit" and verdict["seed"] == 1
    assert [c["factors"] for c in verdict["culprits"]] == [{"commit": shas[7][:12]}]
    # fewer trials than commits
    assert verdict["cost"]["trials"] < 12, (verdict["cost"], [
        (s["phase"], s["levels"], s.get("corrupted"), s.get("sessions")) for s in verdict["log"]])
    assert git(tree, "rev-parse", "HEAD") == shas[-1]  # the tree is left as found
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "main"

    # Each commit is named with its subject and author, stored with the campaign; the terminal
    # escape is gone (a space), the markup is kept as text.
    first, last = shas[7][:12], shas[6][:12]
    subject = "Fix <script>alert('topk')</script> &  [31mkernel"
    author = "Jane \"JD\" O'Doe & co"
    described = verdict["commits"]["described"]
    assert described[first] == {"subject": subject, "author": author}
    assert described[last] == {"subject": "change 6", "author": "t"}
    assert verdict["commits"]["last_good"] == last
    posterior = verdict["commits"]["posterior"]
    assert verdict["reason"] == (f"first bad commit: {first} '{subject}' ({author}), posterior "
                                 f"{posterior:.3f}; last good: {last} 'change 6' (t)")
    campaign_id = verdict["campaign"]
    again = runner.invoke(app, ["verdict", campaign_id, "--store", str(db), "--json"])
    assert json.loads(again.stdout) == verdict  # recomputed from the store, the same words
    human = " ".join(runner.invoke(app, ["verdict", campaign_id, "--store", str(db)])
                     .stdout.split())
    assert f"first bad commit: {first} '{' '.join(subject.split())}' ({author})" in human
    assert f"last good: {last} 'change 6' (t)" in human and "\x1b" not in human
    assert f"from {first} on: " in human
    trail = " ".join(runner.invoke(app, ["log", campaign_id, "--store", str(db)]).stdout.split())
    assert f"posterior {posterior:.4f}" in trail and f"{first} 'Fix <script>" in trail

    report = tmp_path / "report.html"
    assert runner.invoke(app, ["report", campaign_id, "--store", str(db), "-o",
                               str(report)]).exit_code == 0
    html = report.read_text()
    assert "<script>" not in html and "\x1b" not in html
    assert "Fix &lt;script&gt;alert(&#39;topk&#39;)&lt;/script&gt; &amp;" in html
    assert "Jane &#34;JD&#34; O&#39;Doe &amp; co" in html
    assert "Posterior over the first bad commit" in html and "Decision trail" not in html


def test_a_range_that_only_fails_requests_is_searched_for_its_wedging(
        ray_cluster: None, tmp_path: Path) -> None:
    # From commit 5 on, half the requests fail with a 5xx and nothing leaks: the default
    # campaign (corruption) finds the bad commit not worse than the good one, and searches the
    # wedging instead, saying why (issue 13): corruption not reproduced, the wedging's first
    # bad commit a wedge culprit, never a corruption one (issue 27).
    tree = tmp_path / "src"
    shas = history(tree, commits=8, first_bad=5, effect="error")
    path = commits_campaign(tmp_path, tree)
    result = CliRunner().invoke(app, ["commits", str(path), "--good", shas[0], "--bad",
                                      shas[-1], "--store", str(tmp_path / "bisect.db"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "not_reproduced" and verdict["target"] == "corruption"
    assert verdict["culprits"] == [] == verdict["corruption_culprits"]
    assert [c["factors"] for c in verdict["wedge_culprits"]] == [{"commit": shas[5][:12]}]
    reason = verdict["reason"]
    assert reason.startswith("corruption not reproduced; wedging follows the first bad commit: "
                             f"{shas[5][:12]} 'change 5'")
    assert f"(the bad commit {shas[-1][:12]} " in reason and " (0/" in reason
    assert " errors, 0 wedge log lines in " in verdict["reason"]
    assert verdict["failures"]["wedging"]["culprits"][0]["factors"] == {
        "commit": shas[5][:12]}
    assert verdict["failures"]["wedging"]["commits"]["first_bad"] == [shas[5][:12]]
    assert git(tree, "rev-parse", "HEAD") == shas[-1]  # the tree is left as found


@pytest.mark.parametrize(("broken", "first_bad"), [
    ({5, 8}, [7]),  # skips away from the change: the culprit is still exact
    ({6, 7}, [6, 7, 8]),  # the change is in a commit that does not build: git bisect's "any of"
])
def test_commits_that_cannot_be_built_are_skipped(ray_cluster: None, tmp_path: Path,
                                                  broken: set[int], first_bad: list[int]) -> None:
    tree = tmp_path / "src"
    shas = history(tree, commits=12, first_bad=7, broken=broken)
    path = commits_campaign(tmp_path, tree)
    db = tmp_path / "bisect.db"
    runner = CliRunner()
    result = runner.invoke(app, ["commits", str(path), "--good", shas[0], "--bad", shas[-1],
                                 "--store", str(db), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    named = [shas[i][:12] for i in first_bad]
    assert verdict["status"] == "culprit"
    assert verdict["commits"]["first_bad"] == named and verdict["commits"]["posterior"] >= 0.95
    [culprit] = verdict["culprits"]
    assert culprit["factors"] == {"commit": named[0] if len(named) == 1
                                  else f"{named[0]}^..{named[-1]}"}
    if len(named) > 1:  # git bisect's words, each commit with its subject and author
        words = ", ".join(f"{shas[i][:12]} '{subject_of(i)}' (t)".replace("\x1b", " ")
                          for i in first_bad)
        assert verdict["reason"].startswith(
            "There are only 'skip'ped commits left to test. The first bad commit could be any "
            f"of: {words}, posterior ")
    # Every skipped commit is a broken one, skipped with the build's own words; none was judged.
    skipped = verdict["commits"]["skipped"]
    assert skipped and {s["commit"] for s in skipped} <= {shas[i][:12] for i in broken}
    assert all("BROKEN: this commit does not build" in s["error"] for s in skipped)
    assert {u["levels"]["commit"] for u in verdict["unresolvable"]} == \
        {s["commit"] for s in skipped}
    judged = {v["levels"]["commit"] for v in verdict["variants"]}
    assert not judged & {shas[i][:12] for i in broken}
    if len(named) > 1:  # the run next to the change was tried and skipped
        assert set(named[:-1]) <= {s["commit"] for s in skipped}
    assert git(tree, "rev-parse", "HEAD") == shas[-1]  # the tree is left as found

    # The verdict is recomputed from the store, identically; the trail and the trials say why.
    campaign_id = verdict["campaign"]
    again = runner.invoke(app, ["verdict", campaign_id, "--store", str(db), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout) == verdict
    trail = json.loads(runner.invoke(app, ["log", campaign_id, "--store", str(db),
                                           "--json"]).stdout)
    skips = [step for step in trail if step["phase"] == "skipped"]
    assert {step["levels"]["commit"] for step in skips} == {s["commit"] for s in skipped}
    assert all("does not build" in step["reason"] for step in skips)
    human = runner.invoke(app, ["log", campaign_id, "--store", str(db)]).stdout
    assert "cannot be deployed: here: build" in " ".join(human.split())  # wrapped or not
    shown = runner.invoke(app, ["show", campaign_id, "--store", str(db)]).stdout
    assert f"skipped commit={skipped[0]['commit']},hicache=on (2 attempts)" in " ".join(
        shown.split())
    rows = json.loads(runner.invoke(app, ["show", campaign_id, "--store", str(db),
                                          "--json"]).stdout)
    assert {r["levels"]["commit"] for r in rows if r["skipped"]} == \
        {s["commit"] for s in skipped}
    report = tmp_path / "report.html"
    assert runner.invoke(app, ["report", campaign_id, "--store", str(db), "-o",
                               str(report)]).exit_code == 0
    html = report.read_text()
    assert "Skipped commits" in html and "BROKEN: this commit does not build" in html
    assert 'id="first-bad"' in html and all(sha in html for sha in named)


@pytest.mark.parametrize("endpoint", ["good", "bad"])
def test_an_endpoint_that_cannot_be_built_stops_the_campaign(ray_cluster: None, tmp_path: Path,
                                                             endpoint: str) -> None:
    tree = tmp_path / "src"
    # The tree stays at a later commit that builds: the range is 0..10, commit 11 is HEAD.
    shas = history(tree, commits=12, first_bad=7, broken={0 if endpoint == "good" else 10})
    path = commits_campaign(tmp_path, tree)
    result = CliRunner().invoke(app, ["commits", str(path), "--good", shas[0], "--bad", shas[10],
                                      "--store", str(tmp_path / "bisect.db"), "--json"])
    assert result.exit_code == 3, result.output  # inconclusive
    verdict = json.loads(result.stdout)
    sha = shas[0 if endpoint == "good" else 10][:12]
    assert verdict["status"] == "inconclusive" and verdict["culprits"] == []
    assert verdict["reason"].startswith(f"the known-{endpoint} commit {sha} cannot be deployed, "
                                        "so it cannot be verified: ")
    assert "BROKEN: this commit does not build" in verdict["reason"]
    assert [s["commit"] for s in verdict["commits"]["skipped"]] == [sha]
    assert verdict["cost"]["trials"] <= 2  # nothing else was run once it could not be verified
    assert git(tree, "rev-parse", "HEAD") == shas[-1]


def test_a_range_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    history(tree, commits=2, first_bad=1)
    campaign = {
        "name": "no such range",
        "nodes": [{"name": "here", "workdir": str(tmp_path / "services")}],
        "pools": [twin_pool("p", "here", tree / "faults.yaml")],
        "commits": {"tree": str(tree), "good": "main", "bad": "no-such-ref"},
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign))
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(tmp_path / "x.db")])
    assert result.exit_code == 2, result.output
    assert "no-such-ref" in result.stderr and "Traceback" not in result.output
