"""Fault rules on the content of files of a twin's tree (``when.files``), read at the twin's
start: on a real git history, a twin started on each commit shows the fault from the commit that
changed the source on, and `bisect commits` names that commit."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from experiments.twin import faults
from experiments.twin.conditions import FileFacts
from orchestrator.cli import app
from tests.support.git_trees import commits_campaign, git
from tests.support.twins import (
    FAST,
    body,
    get,
    is_leak,
    opening,
    post_chat,
    processes,
    start_pd_pool,
    start_twins,
)

RACY = "def load(layer):\n    return async_load(layer)  # not awaited by the indexer\n"
SAFE = "def load(layer):\n    return sync_load(layer)\n"


def file_model(**extra: Any) -> dict[str, Any]:
    """Leaks whenever src/attention.py calls async_load (the planted source change)."""
    return {"seed": 5, "rules": [{
        "name": "async-load-race",
        "when": {"files": {"src/attention.py": {"contains": "async_load("}}, **extra},
        "probability": 1.0, "effect": "leak",
    }]}


def new_tree(tree: Path) -> None:
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "user.email", "t@example.invalid")
    git(tree, "config", "user.name", "t")


def commit(tree: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", message)
    return git(tree, "rev-parse", "HEAD")


def source_history(tree: Path, commits: int, first_bad: int,
                   model: dict[str, Any]) -> list[str]:
    """A tree whose fault model never changes; its source turns racy at ``first_bad``."""
    new_tree(tree)
    shas = []
    for index in range(commits):
        files = {"faults.yaml": yaml.safe_dump(model), "NOTES": f"change {index}\n",
                 "src/attention.py": RACY if index >= first_bad else SAFE}
        if index >= 2:
            files["src/kernel.py"] = "KERNEL = 2\n"
        shas.append(commit(tree, files, f"change {index}"))
    return shas


@pytest.mark.real
def test_a_twin_on_each_commit_shows_the_fault_from_the_source_change_on(
        tmp_path: Path) -> None:
    tree = tmp_path / "src-tree"
    shas = source_history(tree, commits=6, first_bad=3, model=file_model())
    checkouts = []
    for index, sha in enumerate(shas):  # one checkout per commit: every twin starts at once
        checkout = tmp_path / f"at-{index}"
        git(tree, "worktree", "add", "-q", "--detach", str(checkout), sha)
        checkouts.append(checkout)
    with processes(tmp_path) as procs:
        # No --twin-tree: the tree is the fault model's directory (it lives in the tree).
        urls = start_twins(procs, *((f"c{index}", ("--fault-model", str(at / "faults.yaml"),
                                                   *FAST), None)
                                    for index, at in enumerate(checkouts)))
        leaked = []
        for url in urls:
            status, answer = post_chat(url, body(opening("session-1")))
            assert status == 200
            leaked.append(is_leak(answer))
        assert leaked == [False, False, False, True, True, True]
        # What the twin read at start, in its server info and its log.
        infos = [json.loads(get(f"{url}/get_server_info")[1])["twin"] for url in urls]
        assert [info["tree"] for info in infos] == [str(at) for at in checkouts]
        racy = hashlib.sha256(RACY.encode()).hexdigest()
        assert infos[4]["files"] == {"src/attention.py": {"sha256": racy,
                                                          "found": ["async_load("]}}
        assert infos[0]["files"]["src/attention.py"]["found"] == []
        assert f"src/attention.py sha256={racy}" in procs.log("c5")

    # The other forms, decided on the facts each twin reported: a hash, an absent file.
    model = faults.FaultModel.model_validate({"rules": [
        {"name": "exact", "when": {"files": {"src/attention.py": {"sha256": racy.upper()}}},
         "probability": 1.0, "effect": "wedge"},
        {"name": "before-kernel", "when": {"files": {"src/kernel.py": None}},
         "probability": 1.0, "effect": "error"},
    ]})
    facts = {"src/attention.py": FileFacts.from_json(infos[0]["files"]["src/attention.py"]),
             "src/kernel.py": FileFacts(None)}

    def effect(files: dict[str, FileFacts] | None) -> str | None:
        decision = faults.decide(model, twin_seed=0, flags={}, env={}, inflight=1,
                                 session_key="k", files=files)
        return decision.effect.value if decision else None

    assert effect(facts) == "error"  # safe source, no kernel yet
    assert effect({**facts, "src/attention.py": FileFacts(racy)}) == "wedge"
    assert effect({**facts, "src/kernel.py": FileFacts("0" * 64)}) is None
    assert effect(None) is None  # facts never read match nothing, not even "absent"


@pytest.mark.real
def test_the_tree_can_be_named_apart_from_the_fault_model(tmp_path: Path) -> None:
    tree = tmp_path / "checkout"
    source_history(tree, commits=4, first_bad=3, model={})
    model = tmp_path / "faults.yaml"  # outside the tree
    model.write_text(yaml.safe_dump(file_model()))
    with processes(tmp_path) as procs:
        named, beside = start_twins(
            procs, ("named", ("--fault-model", str(model), "--twin-tree", str(tree), *FAST), None),
            ("beside", ("--fault-model", str(model), *FAST), None))
        assert is_leak(post_chat(named, body(opening("k")))[1])
        assert not is_leak(post_chat(beside, body(opening("k")))[1])  # no src/ next to it
        info = json.loads(get(f"{beside}/get_server_info")[1])["twin"]
        assert info["files"] == {"src/attention.py": {"sha256": None, "found": []}}


@pytest.mark.real
def test_a_decode_without_a_model_decides_on_the_files_its_prefill_read(tmp_path: Path) -> None:
    tree = tmp_path / "checkout"
    source_history(tree, commits=4, first_bad=3, model=file_model())
    with processes(tmp_path) as procs:
        pool = start_pd_pool(procs, prefill_args=("--fault-model", str(tree / "faults.yaml")))
        status, answer = post_chat(pool.router, body(opening("k")))
        assert status == 200 and is_leak(answer)
        assert "Bootstrap: prefill at" in procs.log("decode")


@pytest.mark.pure
@pytest.mark.parametrize(("files", "field", "message"), [
    ({"/etc/passwd": {"contains": "root"}}, "rules[0].when.files", "must be relative"),
    ({"src/../../x": {"contains": "a"}}, "rules[0].when.files", "must be relative"),
    ({"a.py": {}}, "rules[0].when.files.a.py", "give sha256 or contains"),
    ({"a.py": {"sha256": "abc"}}, "rules[0].when.files.a.py.sha256", "should match pattern"),
    ({"a.py": {"contains": ""}}, "rules[0].when.files.a.py.contains", "at least 1"),
    ({"a.py": {"hash": "x"}}, "rules[0].when.files.a.py.hash", "Extra inputs"),
])
def test_bad_file_conditions_name_the_file_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, Any], field: str,
        message: str) -> None:
    from experiments.twin.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"rules": [{"name": "r", "when": {"files": files},
                                               "probability": 0.1, "effect": "leak"}]}))
    assert main(["--fault-model", str(path), "--twin-startup-delay", "0"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"field {field}:" in err and message in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.pure
def test_files_that_cannot_be_read_stop_the_start(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.twin.cli import main

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "attention.py").mkdir()  # a directory where the source should be
    (tmp_path / "outside.py").write_text("async_load(")
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "link.py").symlink_to(tmp_path / "outside.py")
    path = tmp_path / "faults.yaml"
    for tree, why in ((tmp_path, "is not a regular file"), (tmp_path / "tree", "out of the tree"),
                      (tmp_path / "none", "is not a directory")):
        wanted = "src/attention.py" if tree == tmp_path else "link.py"
        path.write_text(yaml.safe_dump({"rules": [{
            "name": "r", "when": {"files": {wanted: {"contains": "x"}}},
            "probability": 0.1, "effect": "leak"}]}))
        code = main(["--fault-model", str(path), "--twin-tree", str(tree),
                     "--twin-startup-delay", "0"])
        err = capsys.readouterr().err
        assert code == 2 and why in err, err
        assert f"fault model {path}, field rules[0].when.files.{wanted}" in err


@pytest.mark.pure
def test_schema_describes_file_conditions_and_per_request_draws() -> None:
    document = faults.schema()
    assert document["$defs"]["Rule"]["properties"]["per"]["default"] == "session"
    assert "per" in document["$defs"]["Noise"]["properties"]
    assert "files" in document["$defs"]["Condition"]["properties"]
    assert {"sha256", "contains"} <= set(document["$defs"]["FileCondition"]["properties"])


@pytest.mark.real
def test_bisect_commits_names_the_commit_that_changed_the_source(ray_cluster: None,
                                                                 tmp_path: Path) -> None:
    tree = tmp_path / "src"
    # Half the sessions leak once HiCache is on and the source calls async_load.
    model = file_model(flags={"enable-hierarchical-cache": True})
    model["rules"][0]["probability"] = 0.5
    shas = source_history(tree, commits=12, first_bad=7, model=model)
    path = commits_campaign(tmp_path, tree)  # its pool's fault model is tree/faults.yaml
    result = CliRunner().invoke(app, ["commits", str(path), "--good", shas[0], "--bad", shas[-1],
                                      "--store", str(tmp_path / "bisect.db"), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert verdict["status"] == "culprit"
    assert [c["factors"] for c in verdict["culprits"]] == [{"commit": shas[7][:12]}]
    assert subprocess.run(["git", "-C", str(tree), "diff", "--quiet", shas[6], shas[7], "--",
                           "faults.yaml"]).returncode == 0  # the model did not change there
