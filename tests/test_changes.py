"""File patches, hooks and moving a node between change stacks, for real: on this machine and
over SSH into a lab host. Git refs have their own file (test_gitref.py)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from deploy.changes import (
    ChangeError,
    DiffError,
    Expected,
    FilePatch,
    GitRef,
    Hook,
    NodeChanges,
    plan,
    recover,
    run_hooks,
)
from deploy.changes.diffparse import Target, targets
from deploy.transports.base import Transport
from tests import changes_support as support
from tests.changes_support import (
    HOSTILE,
    git,
    make_repo,
    mismatches,
    pwned,
    run_value,
    sha256,
)

node, local_node, ssh_node = support.node, support.local_node, support.ssh_node  # the fixtures

Files = dict[str, str | None]  # relative path -> content; None: absent


def unified(old: Files, new: Files) -> str:
    """A unified diff as diff/git write it (a tab after each name, so spaces in names survive)."""
    out: list[str] = []
    for path in dict.fromkeys([*old, *new]):
        a, b = old.get(path), new.get(path)
        out += difflib.unified_diff(
            (a or "").splitlines(True), (b or "").splitlines(True),
            "/dev/null" if a is None else f"a/{path}", "/dev/null" if b is None else f"b/{path}",
            "2024-05-01 00:00:00", "2024-05-01 00:00:00")
    return "".join(out)


def write(root: Path, files: Files) -> None:
    for path, text in files.items():
        if text is not None:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under root: checksum and mode (what "byte-exact" restores)."""
    return {str(p.relative_to(root)): (sha256(p), p.stat().st_mode)
            for p in sorted(root.rglob("*")) if p.is_file()}


OLD: Files = {"pkg/a.py": "A = 1\nkeep = True\n", "pkg/b.py": "#!/bin/sh\necho b\n",
              "pkg/gone.py": "old = 1\n", "pkg/new.py": None}
NEW: Files = {"pkg/a.py": "A = 2\nkeep = True\n", "pkg/b.py": "#!/bin/sh\necho patched b\n",
              "pkg/gone.py": None, "pkg/new.py": "fresh = 1\n"}


def _tree(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "srv"
    write(root, OLD)
    (root / "pkg" / "b.py").chmod(0o755)
    os.utime(root / "pkg" / "gone.py", (1_000_000, 1_000_000))
    return root, str(tmp_path / "work")


@pytest.mark.real
def test_patch_applies_all_files_and_reverts_byte_exactly(node: Transport,
                                                          tmp_path: Path) -> None:
    root, work = _tree(tmp_path)
    before = snapshot(root)
    change = FilePatch(unified(OLD, NEW), str(root), work)
    change.check(node)  # preflight: would apply, and changes nothing
    assert snapshot(root) == before and not list(Path(work).rglob("*check*"))
    applied = change.apply(node)
    for path, text in NEW.items():
        exists = (root / path).exists()
        assert (root / path).read_text() == text if text is not None else not exists
    assert (root / "pkg" / "b.py").stat().st_mode & 0o777 == 0o755
    files = applied.detail["files"]
    after = sha256(root / "pkg/a.py")
    assert files["pkg/a.py"] == {"before": before["pkg/a.py"][0], "after": after}
    assert files["pkg/new.py"]["before"] == "-" and files["pkg/gone.py"]["after"] == "-"
    assert applied.fingerprint == change.fingerprint and applied.node == node.node
    # What the proof of load will check: every file the patch leaves, none it deleted.
    assert applied.expected == Expected({f"{root}/{path}": sha256(root / path)
                                         for path, text in NEW.items() if text is not None})
    assert mismatches(node, applied.expected) == []
    assert not list(root.rglob("*.bisect-*"))

    assert change.revert(node) is True
    assert snapshot(root) == before
    assert (root / "pkg" / "gone.py").stat().st_mtime == 1_000_000  # even its time
    assert not Path(change.state).exists()
    assert change.revert(node) is False
    assert sorted(mismatches(node, applied.expected)) == [  # no longer in effect
        f"{root}/pkg/a.py has sha256 {before['pkg/a.py'][0]}, not {files['pkg/a.py']['after']}",
        f"{root}/pkg/b.py has sha256 {before['pkg/b.py'][0]}, not {files['pkg/b.py']['after']}",
        f"{root}/pkg/new.py has sha256 -, not {files['pkg/new.py']['after']}"]


@pytest.mark.real
def test_a_patch_that_does_not_apply_leaves_every_file_untouched(node: Transport,
                                                                 tmp_path: Path) -> None:
    root, work = _tree(tmp_path)
    (root / "pkg" / "b.py").write_text("#!/bin/sh\necho someone else's b\n")
    before = snapshot(root)
    with pytest.raises(ChangeError, match=rf"does not apply to {root}/pkg/b\.py"):
        FilePatch(unified(OLD, NEW), str(root), work).check(node)
    with pytest.raises(ChangeError) as error:
        FilePatch(unified(OLD, NEW), str(root), work).apply(node)
    message = str(error.value)
    assert message.startswith(f"{node.node}: ") and "node unchanged" in message
    assert f"does not apply to {root}/pkg/b.py" in message and "FAILED" in message
    assert snapshot(root) == before  # a.py applied cleanly in staging, but not here either
    assert not (Path(work) / "bisect-variants").exists() or not any(
        (Path(work) / "bisect-variants").iterdir())


@pytest.mark.real
def test_revert_refuses_to_clobber_a_file_changed_since(node: Transport, tmp_path: Path) -> None:
    root, work = _tree(tmp_path)
    original = snapshot(root)
    change = FilePatch(unified(OLD, NEW), str(root), work)
    applied = change.apply(node)
    (root / "pkg" / "a.py").write_text("A = 'hotfix by a colleague'\n")
    touched = snapshot(root)
    with pytest.raises(ChangeError, match=rf"refusing to revert .*{root}/pkg/a\.py .*sha256 now"):
        change.revert(node)
    assert snapshot(root) == touched  # nothing restored, not even the untouched files
    hotfix = sha256(root / "pkg" / "a.py")  # the proof would see it: not the patched code
    assert mismatches(node, applied.expected) == [
        f"{root}/pkg/a.py has sha256 {hotfix}, not {applied.expected.files[f'{root}/pkg/a.py']}"]
    (root / "pkg" / "a.py").write_text(NEW["pkg/a.py"] or "")  # the colleague backs out
    assert change.revert(node) is True and snapshot(root) == original


@pytest.mark.real
def test_patch_refusals_name_the_file_and_change_nothing(local_node: Transport,
                                                         tmp_path: Path) -> None:
    root, work = _tree(tmp_path)
    before = snapshot(root)
    cases = [
        (unified({"pkg/gone.py": "x\n", "pkg/nope.py": "x\n"}, {"pkg/nope.py": "y\n"}),
         "pkg/nope.py does not exist"),
        (unified({"pkg/a.py": None}, {"pkg/a.py": "x\n"}), "pkg/a.py already exists"),
        (unified({"nodir/n.py": None}, {"nodir/n.py": "x\n"}), "nodir/n.py has no parent"),
    ]
    os.symlink(root / "pkg" / "a.py", root / "link.py")
    cases.append((unified({"link.py": "A = 1\n"}, {"link.py": "A = 3\n"}), "is a symbolic link"))
    for diff, reason in cases:
        with pytest.raises(ChangeError, match=reason):
            FilePatch(diff, str(root), work).apply(local_node)
    before["link.py"] = before["pkg/a.py"]
    assert snapshot(root) == before

    change = FilePatch(unified(OLD, NEW), str(root), work)
    change.apply(local_node)
    with pytest.raises(ChangeError, match="already applied"):
        change.apply(local_node)
    # A change already in the file, without our record: patch --batch would take the diff as
    # reversed and *undo* it; we ask it to refuse instead.
    again = unified({"pkg/a.py": OLD["pkg/a.py"]}, {"pkg/a.py": NEW["pkg/a.py"]})
    with pytest.raises(ChangeError, match="Reversed"):
        FilePatch(again, str(root), work).apply(local_node)
    change.revert(local_node)


@pytest.mark.pure
def test_diff_headers_are_read_like_patch_reads_them() -> None:
    # Hunk lines "--- not" / "+++ nor" look like a file header; counting hunk lines tells.
    diff = unified({"x/a b.py": "-- not\n", "y.py": None}, {"x/a b.py": "++ nor\n", "y.py": "1\n"})
    assert "\n--- not\n+++ nor\n" in diff
    assert targets(diff) == [Target("x/a b.py", "M"), Target("y.py", "C")]
    assert targets('--- "a/q\\"uote\\303\\251"\n+++ "b/q\\"uote\\303\\251"\n@@ -1 +1 @@\n-x\n+y\n'
                   ) == [Target('q"uoteé', "M")]
    epoch = ("--- a/n.py\t1970-01-01 00:00:00.000000000 +0000\n+++ b/n.py\t2024-01-01\n"
             "@@ -0,0 +1 @@\n+n\n")
    assert targets(epoch) == [Target("n.py", "C")]  # diff -N marks creation by the epoch
    for bad, reason in [
        (unified({"../etc/passwd": "x\n"}, {"../etc/passwd": "y\n"}), "leaves the patch root"),
        ("--- a/x.py\n+++ b/y.py\n@@ -1 +1 @@\n-x\n+y\n", "renames are not supported"),
        ("just text\n", "not a unified diff"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-x\n?y\n", "malformed hunk"),
    ]:
        with pytest.raises(DiffError, match=reason):
            targets(bad)
    with pytest.raises(ValueError, match="absolute"):
        FilePatch(diff, "relative/root", "/tmp/w")


@pytest.mark.real
def test_hostile_names_arrive_verbatim_and_run_nothing(node: Transport, tmp_path: Path) -> None:
    root = tmp_path / HOSTILE[0].format(dir=tmp_path)
    work = str(tmp_path / HOSTILE[1].format(dir=tmp_path))
    names = [f"{HOSTILE[1].format(dir=tmp_path).replace('/', '_')}.py",
             f"{HOSTILE[2].format(dir=tmp_path).replace('/', '_')} x.py", "-rf"]
    old: Files = {name: f"{name}\n" for name in names}
    new: Files = {name: f"patched {name}\n" for name in names}
    write(root, old)
    before = snapshot(root)
    change = FilePatch(unified(old, new), str(root), work)
    assert sorted(change.apply(node).detail["files"]) == sorted(names)
    assert all((root / name).read_text() == new[name] for name in names)
    change.revert(node)
    assert snapshot(root) == before and pwned(tmp_path) == []


@pytest.mark.real
def test_a_large_patch_travels_in_chunks(node: Transport, tmp_path: Path) -> None:
    root, work = _tree(tmp_path)
    big = "".join(f"line {i} {'x' * 60}\n" for i in range(1800))  # ~120 KB: three chunks
    change = FilePatch(unified({"pkg/big.py": None}, {"pkg/big.py": big}), str(root), work)
    change.apply(node)
    assert (root / "pkg" / "big.py").read_text() == big
    change.revert(node)
    assert not (root / "pkg" / "big.py").exists()


@pytest.mark.real
def test_hooks_run_with_values_verbatim_and_fail_by_name(node: Transport, tmp_path: Path) -> None:
    value = HOSTILE[0].format(dir=tmp_path)
    cwd = tmp_path / HOSTILE[2].format(dir=tmp_path)
    cwd.mkdir(parents=True)
    ok = Hook(("sh", "-c", 'printf "%s|%s|%s" "$(pwd)" "$V" "$1"', "sh", value),
              cwd=str(cwd), env={"V": HOSTILE[1].format(dir=tmp_path)})
    [result] = run_hooks(node, [ok], "pre")
    assert result.stdout_tail == f"{cwd}|{HOSTILE[1].format(dir=tmp_path)}|{value}"
    failing = Hook(("sh", "-c", "echo progress; echo 'cannot drop caches' >&2; exit 4"))
    with pytest.raises(ChangeError, match=r"post hook `sh -c .*` exited 4: cannot drop caches"):
        run_hooks(node, [failing, ok], "post")
    with pytest.raises(ChangeError, match="command not found"):
        run_hooks(node, [Hook((f"{tmp_path}/no-such-tool",))], "pre")
    assert pwned(tmp_path) == []


@pytest.mark.real
def test_a_hanging_hook_is_killed_on_the_node(local_node: Transport, tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    hook = Hook(("sh", "-c", f"sleep 5; touch {marker}"), timeout_s=0.3)
    with pytest.raises(ChangeError, match=r"timed out after 0\.3s"):
        run_hooks(local_node, [hook], "pre")
    with pytest.raises(ValueError, match="invalid environment variable names"):
        Hook(("true",), env={"A B": "x"})


@pytest.mark.pure
def test_plan_keeps_the_common_prefix_and_reverts_newest_first(tmp_path: Path) -> None:
    def patch(n: int) -> FilePatch:
        return FilePatch(unified({"a": f"{n}\n"}, {"a": f"{n + 1}\n"}), "/r", str(tmp_path))

    ref = GitRef("/r", "v1", str(tmp_path))
    step = plan([ref, patch(1), patch(2)], [patch(1), patch(3), ref])  # any order in: git first
    assert (step.revert, step.apply) == ([patch(2)], [patch(3)])
    step = plan([ref, patch(1)], [GitRef("/r", "v2", str(tmp_path)), patch(1)])
    assert step.revert == [patch(1), ref] and step.apply[0].fingerprint.endswith("@v2")


@pytest.mark.real
def test_a_node_moves_between_stacks_and_is_restored(node: Transport, tmp_path: Path) -> None:
    repo, work = tmp_path / "src", str(tmp_path / "work")
    v1, v2, v3 = make_repo(repo)
    at_v1 = "VALUE = 1\n\nif __name__ == '__main__':\n    print(VALUE)\n"
    fix = FilePatch(unified({"pkg/value.py": at_v1}, {"pkg/value.py": at_v1.replace("1", "10")}),
                    str(repo), work)
    stack = NodeChanges(node)
    assert stack.move_to([fix, GitRef(str(repo), v1, work)]) is True  # the checkout goes first
    assert run_value(repo) == "10"
    assert [a.kind for a in stack.applied()] == ["git", "patch"]
    assert stack.move_to([GitRef(str(repo), v2, work)]) is True  # patch off, then the move
    assert run_value(repo) == "2" and git(repo, "status", "--porcelain") == ""

    stack.move_to([GitRef(str(repo), v1, work), fix])
    candidates = [GitRef(str(repo), ref, work) for ref in (v1, v2)] + [fix]
    assert recover(node, candidates) == [fix.fingerprint, f"git:{repo}"]  # as after a crash
    assert git(repo, "rev-parse", "HEAD") == v3 and run_value(repo) == "3"
    assert recover(node, candidates) == []
