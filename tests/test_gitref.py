"""Git-ref changes on a real repository, on this machine and over SSH into a lab host: checkout,
bytecode purge, build, exact revert (branch and HEAD), dirty trees, the commit range, and refs or
paths that look like shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.changes import ChangeError, Expected, GitRef, NodeChanges, check_refs, resolve_range
from deploy.transports.base import Transport
from tests import changes_support as support
from tests.changes_support import (
    HOSTILE,
    PY,
    compile_caches,
    git,
    make_repo,
    mismatches,
    pwned,
    run_value,
)

pytestmark = pytest.mark.real

node, local_node, ssh_node = support.node, support.local_node, support.ssh_node  # the fixtures

BUILD = ("sh", "-c", f"mkdir -p out && {PY} -B -m pkg.value | tee -a out/builds.log")


def _head(repo: Path) -> tuple[str, str]:
    branch = git(repo, "rev-parse", "--symbolic-full-name", "HEAD")  # "HEAD" when detached
    return git(repo, "rev-parse", "HEAD"), branch


def test_checkout_purges_builds_and_reverts_exactly(node: Transport, tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, _, v3 = make_repo(repo)
    caches = compile_caches(repo)
    change = GitRef(str(repo), v1[:10], str(tmp_path / "work"), build=BUILD)

    applied = change.apply(node)
    assert _head(repo) == (v1, "HEAD")  # detached at the resolved commit
    assert not any(path.exists() for path in caches)
    assert run_value(repo) == "1"
    assert (repo / "out" / "builds.log").read_text() == "1\n"  # built in the tree, at v1
    assert applied.node == node.node and applied.fingerprint.startswith(f"git:{repo}@")
    detail = applied.detail
    assert (detail["commit"], detail["original"], detail["branch"]) == (v1, v3, "refs/heads/main")
    assert detail["purged"] == 2 and detail["build"]["tail"] == "1"
    assert applied.expected == Expected(git=(str(repo), v1))  # what the proof of load checks
    assert mismatches(node, applied.expected) == []

    compile_caches(repo)  # the server ran at v1 and left bytecode of v1
    assert change.revert(node) is True
    assert _head(repo) == (v3, "refs/heads/main")  # back on the branch, not a detached v3
    assert not any(path.exists() for path in caches)
    assert (repo / "out" / "builds.log").read_text() == "1\n3\n"  # rebuilt at the original
    assert not list((tmp_path / "work").rglob("git-*"))  # the record is gone
    assert change.revert(node) is False  # nothing left to undo
    assert mismatches(node, applied.expected) == [f"{repo} is at {v3}, not {v1}"]


def test_a_detached_original_is_restored_detached(local_node: Transport, tmp_path: Path) -> None:
    repo = tmp_path / "src"
    _, v2, v3 = make_repo(repo)
    git(repo, "checkout", "-q", "--detach", v2)
    change = GitRef(str(repo), "main", str(tmp_path / "work"))
    assert change.apply(local_node).detail["commit"] == v3
    change.revert(local_node)
    assert _head(repo) == (v2, "HEAD")


def test_moving_between_refs_keeps_the_original_and_builds_once_per_move(
        node: Transport, tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, v2, v3 = make_repo(repo)
    work = str(tmp_path / "work")
    stack = NodeChanges(node)
    assert stack.move_to([GitRef(str(repo), v1, work, build=BUILD)]) is True
    assert stack.move_to([GitRef(str(repo), v1, work, build=BUILD)]) is False  # no change
    assert stack.move_to([GitRef(str(repo), v2, work, build=BUILD)]) is True
    assert _head(repo) == (v2, "HEAD")
    assert [a.detail["original"] for a in stack.applied()] == [v3]  # not v1
    stack.restore()
    assert _head(repo) == (v3, "refs/heads/main")
    assert (repo / "out" / "builds.log").read_text() == "1\n2\n3\n"  # never the original between


def test_a_dirty_tree_is_refused_and_left_as_it_was(node: Transport, tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, _, v3 = make_repo(repo)
    compile_caches(repo)  # bytecode alone is not dirt: it is purged anyway
    (repo / "pkg" / "value.py").write_text("VALUE = 'local edit'\n")
    (repo / "pkg" / "new file.py").write_text("x = 1\n")
    with pytest.raises(ChangeError) as error:
        GitRef(str(repo), v1, str(tmp_path / "work")).apply(node)
    message = str(error.value)
    assert message.startswith(f"{node.node}: ") and "uncommitted changes" in message
    assert "pkg/value.py" in message and "pkg/new file.py" in message
    assert _head(repo) == (v3, "refs/heads/main")
    assert (repo / "pkg" / "value.py").read_text() == "VALUE = 'local edit'\n"
    assert (repo / "pkg" / "__pycache__").is_dir()  # not even purged
    assert not (tmp_path / "work").exists()  # no record


def test_revert_refuses_to_clobber_changes_made_after_apply(node: Transport,
                                                             tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, _, v3 = make_repo(repo)
    change = GitRef(str(repo), v1, str(tmp_path / "work"))
    change.apply(node)
    (repo / "pkg" / "value.py").write_text("VALUE = 'hotfix'\n")
    with pytest.raises(ChangeError, match=r"uncommitted changes.*pkg/value\.py"):
        change.revert(node)
    assert _head(repo) == (v1, "HEAD")
    assert (repo / "pkg" / "value.py").read_text() == "VALUE = 'hotfix'\n"
    git(repo, "checkout", "--", "pkg/value.py")
    assert change.revert(node) is True and _head(repo) == (v3, "refs/heads/main")


def test_a_failed_build_returns_the_tree_to_its_original(local_node: Transport,
                                                         tmp_path: Path) -> None:
    repo, work = tmp_path / "src", str(tmp_path / "work")
    v1, _, v3 = make_repo(repo)
    # Broken at v1 only: the restore rebuilds the original, which must work.
    broken = ("sh", "-c", f"echo compiling; [ $({PY} -B -m pkg.value) != 1 ] "
                          "|| { echo 'error: kernel does not build' >&2; exit 3; }")
    with pytest.raises(ChangeError, match=r"(?s)exited 3: .*kernel does not build; the tree is "
                                           r"back at its original HEAD and rebuilt"):
        GitRef(str(repo), v1, work, build=broken).apply(local_node)
    assert _head(repo) == (v3, "refs/heads/main")
    assert not list((tmp_path / "work").rglob("git-*"))

    always = ("sh", "-c", "exit 7")  # the original does not build either: say so, keep the record
    with pytest.raises(ChangeError, match=r"(?s)restoring the original HEAD failed.*record stays"):
        GitRef(str(repo), v1, work, build=always).apply(local_node)
    assert _head(repo) == (v3, "refs/heads/main")
    assert GitRef(str(repo), v1, work).revert(local_node) is True  # without the build: done

    slow = ("sleep", "30")
    with pytest.raises(ChangeError, match=r"timed out after 0\.5s"):
        GitRef(str(repo), v1, work, build=slow, build_timeout_s=0.5).apply(local_node)
    assert _head(repo) == (v3, "refs/heads/main")


def test_refs_and_paths_that_look_like_shell_are_only_names(node: Transport,
                                                           tmp_path: Path) -> None:
    repo = tmp_path / HOSTILE[0].format(dir=tmp_path) / "$(id)"
    v1, _, v3 = make_repo(repo)
    work = str(tmp_path / HOSTILE[1].format(dir=tmp_path))
    refs = [value.format(dir=tmp_path) for value in HOSTILE]
    refs += [f"--output={tmp_path}/PWNED_o", f"main; touch {tmp_path}/PWNED_s", "-b"]
    for ref in refs:
        with pytest.raises(ChangeError, match="has no commit named by the ref"):
            GitRef(str(repo), ref, work).apply(node)
    assert check_refs(node, str(repo), [*refs, "main"]) == {**dict.fromkeys(refs), "main": v3}
    change = GitRef(str(repo), v1, work, build=("sh", "-c", 'printf "%s" "$0"', refs[0]))
    assert change.apply(node).detail["build"]["tail"] == refs[0]  # build argv verbatim
    assert run_value(repo) == "1"
    change.revert(node)
    assert _head(repo) == (v3, "refs/heads/main")
    assert pwned(tmp_path) == []


def test_resolve_range_lists_oldest_first_and_names_bad_input(node: Transport,
                                                             tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, v2, v3 = make_repo(repo)
    tree = str(repo)
    assert resolve_range(node, tree, v1, "main") == [v1, v2, v3]
    assert resolve_range(node, tree, v2[:8], v3) == [v2, v3]
    git(repo, "checkout", "-q", "-b", "side", v1)
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", "side.txt")
    git(repo, "commit", "-q", "-m", "side")
    with pytest.raises(ChangeError, match="not a descendant of good"):
        resolve_range(node, tree, v3, v1)
    with pytest.raises(ChangeError, match="not a descendant of good"):
        resolve_range(node, tree, v2, "side")
    with pytest.raises(ChangeError, match="good ref 'nope' names no commit"):
        resolve_range(node, tree, "nope", v3)
    hostile = HOSTILE[1].format(dir=tmp_path)
    with pytest.raises(ChangeError, match=r"bad ref .* names no commit"):
        resolve_range(node, tree, v1, hostile)
    with pytest.raises(ChangeError, match="same commit"):
        resolve_range(node, tree, v3, "main")
    with pytest.raises(ChangeError, match="is not a git work tree"):
        resolve_range(node, str(tmp_path), v1, v3)
    assert pwned(tmp_path) == []


def test_resolve_range_through_a_merge(local_node: Transport, tmp_path: Path) -> None:
    repo = tmp_path / "src"
    v1, v2, v3 = make_repo(repo)
    git(repo, "checkout", "-q", "-b", "feature", v2)
    (repo / "feature.txt").write_text("f\n")
    git(repo, "add", "feature.txt")
    git(repo, "commit", "-q", "-m", "feature")
    feature = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "feature")
    merge = git(repo, "rev-parse", "HEAD")
    every = resolve_range(local_node, str(repo), v1, merge)
    assert every[0] == v1 and every[-1] == merge and set(every) == {v1, v2, v3, feature, merge}
    assert resolve_range(local_node, str(repo), v1, merge, first_parent=True) == [v1, v2, v3, merge]
