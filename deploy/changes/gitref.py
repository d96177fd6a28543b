"""Git refs: check out a commit in a node's source tree, purge stale bytecode, build; revert to the
original HEAD (branch or detached commit).

There is no network on the nodes: the ref must already exist in the tree (no ``git fetch``). The
ref is resolved with ``rev-parse --end-of-options REF^{commit}`` and the checkout is of the
resolved sha, so a ref is only ever a name: one that looks like an option or like shell is simply
a ref that does not exist. (Campaign validation refuses such refs before that: ``ref_error`` in
deploy/safe_words.py.) Stale ``__pycache__`` is purged on every move because a health check
cannot tell old bytecode from new code (the real investigation lost time to exactly that).

The original HEAD is recorded on the node (``WORKDIR/bisect-variants/git-*``) before the first
checkout and kept while the tree moves from ref to ref, so the tree returns to where it was
found even after a crash, from another process.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from deploy.changes.base import Applied, ChangeError, Expected, digest, run_sh, state_path, tail
from deploy.safe_words import check_argv
from deploy.transports.base import Transport

# Shared by the scripts (values arrive as "$1"...). Our own purge targets are not "dirty": they
# are about to be deleted anyway. A dirty tree is refused by printing DIRTY and the NUL-separated
# `status --porcelain -z` (names with any characters survive the trip).
_COMMON = r"""
command -v git >/dev/null || { echo "E git is not installed"; exit 3; }
top=$(git -C "$tree" rev-parse --show-toplevel 2>/dev/null) \
  || { echo "E is not a git work tree"; exit 3; }
dirty() {
  git -C "$top" --no-optional-locks status --porcelain -z --untracked-files=all -- ":(top)" \
    ":(top,exclude,glob)**/__pycache__/**" ":(top,exclude,glob)**/*.py[co]"
}
refuse_dirty() { if [ -n "$(dirty | head -c 1)" ]; then echo DIRTY; dirty; exit 4; fi; }
purge() {
  find "$top" -name .git -prune -o -type d -name __pycache__ -prune -print -exec rm -rf -- {} + \
    -o -type f -name "*.py[co]" -print -exec rm -f -- {} +
}
rev() { git -C "$top" rev-parse --verify --quiet --end-of-options "$1^{commit}"; }
# The build runs under `timeout` on the node, so a hung build is killed there, not abandoned.
build() {
  [ $# -gt 0 ] || return 0
  out=$(cd -- "$tree" && timeout -k 10 -- "$limit" "$@" 2>&1); rc=$?
  echo "BUILD $rc"; printf "%s\n" "$out" | tail -c 4000; return $rc
}
"""

# The original HEAD is recorded before the checkout, and only by the first apply: a tree moving
# from ref to ref keeps the HEAD it was found at.
_APPLY = r"""
tree=$1; record=$2; ref=$3; limit=$4; shift 4
""" + _COMMON + r"""
if [ -f "$record" ]; then echo "M 1"; else echo "M 0"; fi
sha=$(rev "$ref") || { echo "E has no commit named by the ref"; exit 3; }
refuse_dirty
if [ ! -f "$record" ]; then
  orig=$(git -C "$top" rev-parse --verify --quiet HEAD) || { echo "E has no HEAD commit"; exit 3; }
  branch=$(git -C "$top" symbolic-ref -q HEAD) || branch=
  { (umask 077 && mkdir -p -- "$(dirname -- "$record")" \
    && printf "%s\n%s\n" "$orig" "$branch" > "$record.tmp") && mv -f -- "$record.tmp" "$record"
  } || { echo "E cannot write $record"; exit 3; }
fi
{ read -r orig; read -r branch; } < "$record"
echo "O $orig $branch"
out=$(git -C "$top" checkout --quiet --detach "$sha" 2>&1) \
  || { echo CHECKOUT; printf "%s\n" "$out"; exit 5; }
echo "OK $(git -C "$top" rev-parse HEAD) $(purge | wc -l)"
build "$@" || exit 6
"""

# A branch is restored by name (`checkout NAME --`: the branch, never a path or a detached tag).
_REVERT = r"""
tree=$1; record=$2; limit=$3; shift 3
[ -f "$record" ] || { echo NONE; exit 0; }
""" + _COMMON + r"""
{ read -r orig; read -r branch; } < "$record"
refuse_dirty
if [ -n "$branch" ]; then
  out=$(git -C "$top" checkout --quiet "${branch#refs/heads/}" -- 2>&1)
else
  out=$(git -C "$top" checkout --quiet --detach "$orig" 2>&1)
fi || { echo CHECKOUT; printf "%s\n" "$out"; exit 5; }
echo "OK $(purge | wc -l)"
build "$@" || exit 6  # the record stays until the original is built again
rm -f -- "$record"
"""

_RANGE = r"""
tree=$1
""" + _COMMON + r"""
g=$(rev "$2") || { echo "E good"; exit 3; }
b=$(rev "$3") || { echo "E bad"; exit 3; }
git -C "$top" merge-base --is-ancestor "$g" "$b"; r=$?
[ $r -eq 0 ] || { echo "E order $r"; exit 4; }
echo "$g"
git -C "$top" rev-list --reverse --ancestry-path ${4:+"$4"} "$g..$b"
"""

_CHECK = r"""
tree=$1; shift
""" + _COMMON + r"""
for r in "$@"; do s=$(rev "$r") || s=-; echo "$s"; done
"""


def _dirty_paths(output: str) -> list[str]:
    """Paths from ``status --porcelain -z`` after the DIRTY marker (a rename's second entry is
    its old name, which has no status of its own)."""
    entries = output.split("DIRTY\n", 1)[-1].split("\0")
    paths, skip = [], False
    for entry in entries:
        if skip or len(entry) < 4:
            skip = False
            continue
        paths.append(entry[3:])
        skip = entry[0] in "RC"
    return paths


def _error(tree: str, what: str, lines: list[str], stdout: str, stderr: str) -> str:
    if "DIRTY" in lines:
        paths = _dirty_paths(stdout)
        shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
        return (f"{what}: the tree {tree} has uncommitted changes, refused (nothing was changed):"
                f" {shown}")
    if "CHECKOUT" in lines:
        at = lines.index("CHECKOUT")
        return f"{what}: git checkout failed in {tree}: {tail(chr(10).join(lines[at + 1:]), 800)}"
    for line in lines:
        if line.startswith("E "):
            return f"{what}: {tree} {line[2:]}"
    return f"{what} in {tree}: {tail(stderr or stdout, 500)}"


@dataclass(frozen=True)
class GitRef:
    """Check out ``ref`` in the git tree ``tree`` of one node, then run ``build`` (an argv, in
    the tree) if given. ``workdir`` is the node's bisect-owned directory for the record."""

    tree: str
    ref: str
    workdir: str
    build: tuple[str, ...] = ()
    build_timeout_s: float = 1800.0
    kind: str = field(default="git", init=False)
    stack_order: int = field(default=0, init=False)  # first: patches may target the tree's files

    def __post_init__(self) -> None:
        if not self.tree.startswith("/"):
            raise ValueError(f"git tree must be an absolute path, not {self.tree!r}")
        object.__setattr__(self, "build", tuple(self.build))
        check_argv((self.tree, self.ref, self.workdir, *self.build), f"git tree {self.tree!r}")

    @property
    def fingerprint(self) -> str:
        built = f"+build:{digest(*self.build)[:8]}" if self.build else ""
        return f"git:{self.tree}@{self.ref}{built}"

    @property
    def record(self) -> str:
        return state_path(self.workdir, f"git-{digest(self.tree)[:16]}")

    def _build_args(self, build: bool) -> list[str]:
        return [f"{self.build_timeout_s:g}", *(self.build if build else ())]

    def _build_failure(self, lines: list[str]) -> str:
        at = next(i for i, line in enumerate(lines) if line.startswith("BUILD "))
        code = int(lines[at].split()[1])
        why = (f"timed out after {self.build_timeout_s:g}s" if code == 124
               else f"exited {code}")
        return (f"build `{shlex.join(self.build)}` in {self.tree} {why}: "
                f"{tail(chr(10).join(lines[at + 1:]))}")

    def apply(self, transport: Transport) -> Applied:
        """Check out and build. On failure the tree is back at its original HEAD (and rebuilt
        there when it had moved or the build failed), with no record left: never half-way."""
        node, what = transport.node, f"cannot check out {self.ref!r}"
        began = time.monotonic()
        result = run_sh(transport, _APPLY, [self.tree, self.record, self.ref,
                                            *self._build_args(True)],
                        timeout_s=self.build_timeout_s + 60)
        lines = result.stdout.splitlines()
        if result.returncode == 6:
            restored = self._restore_after_failure(transport, rebuild=True)
            raise ChangeError(node, f"{self._build_failure(lines)}{restored}")
        if not result.ok:
            message = _error(self.tree, what, lines, result.stdout, result.stderr)
            moving = "M 1" in lines
            if moving or "CHECKOUT" in lines:  # a record exists: go back to the original
                message += self._restore_after_failure(transport, rebuild=moving)
            raise ChangeError(node, message)
        _, orig, *branch = next(line for line in lines if line.startswith("O ")).split(" ", 2)
        _, sha, purged = next(line for line in lines if line.startswith("OK ")).split()
        detail: dict[str, object] = {
            "tree": self.tree, "ref": self.ref, "commit": sha, "original": orig,
            "branch": branch[0] if branch and branch[0] else None, "purged": int(purged),
            "seconds": round(time.monotonic() - began, 3)}
        if self.build:
            at = lines.index("BUILD 0")
            detail["build"] = {"argv": list(self.build),
                               "tail": tail(chr(10).join(lines[at + 1:]), 1000)}
        return Applied(self.kind, node, self.fingerprint, detail,
                       Expected(git=(self.tree, sha)))

    def _restore_after_failure(self, transport: Transport, rebuild: bool) -> str:
        try:
            self.revert(transport, rebuild=rebuild)
        except ChangeError as exc:
            return f"; and restoring the original HEAD failed too: {exc}"
        return "; the tree is back at its original HEAD" + (" and rebuilt" if rebuild else "")

    def revert(self, transport: Transport, *, rebuild: bool = True) -> bool:
        """Back to the recorded original: its branch (or detached commit), bytecode purged, the
        build run again (unless ``rebuild`` is False: the caller builds another ref next)."""
        node, what = transport.node, "cannot restore the original HEAD"
        result = run_sh(transport, _REVERT, [self.tree, self.record,
                                             *self._build_args(rebuild)],
                        timeout_s=self.build_timeout_s + 60)
        lines = result.stdout.splitlines()
        if result.returncode == 6:
            raise ChangeError(node, f"{what}: the checkout is back but "
                                    f"{self._build_failure(lines)}; the record stays in "
                                    f"{self.record}")
        if not result.ok:
            raise ChangeError(node, _error(self.tree, what, lines, result.stdout,
                                           result.stderr))
        return lines[-1:] != ["NONE"]


def resolve_range(transport: Transport, tree: str, good: str, bad: str, *,
                  first_parent: bool = False) -> list[str]:
    """The commits from ``good`` to ``bad``, oldest first, ``good`` itself first: the ordered
    list the ``commits`` strategy bisects. ``first_parent`` follows only the mainline through
    merges, which keeps the list a chain when side branches were merged in."""
    check_argv((tree, good, bad), f"git tree {tree!r}")
    node = transport.node
    flags = "--first-parent" if first_parent else ""
    result = run_sh(transport, _RANGE, [tree, good, bad, flags])
    lines = result.stdout.splitlines()
    if not result.ok:
        error = next((line for line in lines if line.startswith("E ")), "")
        if error == "E good":
            raise ChangeError(node, f"{tree}: good ref {good!r} names no commit in the tree")
        if error == "E bad":
            raise ChangeError(node, f"{tree}: bad ref {bad!r} names no commit in the tree")
        if error == "E order 1":
            raise ChangeError(node, f"{tree}: bad {bad!r} is not a descendant of good "
                                    f"{good!r}: no commit range between them")
        raise ChangeError(node, f"{tree}: cannot list {good!r}..{bad!r}: "
                                f"{tail(error[2:] or result.stderr, 500)}")
    commits = [line for line in lines if line]
    if len(commits) < 2:
        raise ChangeError(node, f"{tree}: good {good!r} and bad {bad!r} are the same commit")
    return commits


def check_refs(transport: Transport, tree: str, refs: Sequence[str]) -> dict[str, str | None]:
    """Each ref resolved to its commit, or None: for validating a campaign before it starts."""
    check_argv((tree, *refs), f"git tree {tree!r}")
    result = run_sh(transport, _CHECK, [tree, *refs])
    lines = result.stdout.splitlines()
    if not result.ok or len(lines) != len(refs):
        raise ChangeError(transport.node, f"{tree}: {tail(result.stdout + result.stderr, 300)}")
    return {ref: (sha if sha != "-" else None) for ref, sha in zip(refs, lines, strict=True)}
