"""File patches: a unified diff applied to a node's files, all or none, reverted byte-exactly.

Apply: back up and checksum every target, run ``patch`` on copies in a staging directory, copy
each result next to its target, then rename them all into place (a rename within a directory is
atomic, so no file is ever seen half-written). The checksums before and after are recorded on
the node *before* the renames, so a crash at any point leaves enough to revert. Revert refuses
when a file no longer has the checksum the patch left: someone else changed it since, and
restoring our backup would destroy their change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deploy.changes.base import (
    Applied,
    ChangeError,
    Expected,
    digest,
    payload,
    run_sh,
    state_path,
    tail,
)
from deploy.changes.diffparse import Target, targets
from deploy.transports.base import Transport

# Shared by the scripts (values arrive as "$1"...): sum F is F's sha256, or "-" when F does not
# exist; `next` steps to the next target: "$k" its kind (M, C, D), "$t" its path (./-prefixed, so
# no name is read as an option), "$s" its staged copy, "$b"/"$a" its recorded sums before/after.
_COMMON = r"""
sum() { if [ -e "$1" ]; then sha256sum < "$1" | cut -d" " -f1; else echo -; fi; }
next() {
  k=$1; t=./$2; s=$st/stage/$2; i=$((i+1))
  l=$(sed -n "${i}p" "$st/sums" 2>/dev/null); b=${l#* }; a=${b#* }; b=${b%% *}
}
clean() {
  i=0; while [ $# -gt 0 ]; do next "$@"; shift 2; rm -f -- "$t.bisect-new" "$t.bisect-old"; done
}
"""

_APPLY = r"""
st=$1; root=$2; strip=$3; diff=$4; mode=$5; shift 5
case $st in /*) ;; *) st=$PWD/$st;; esac
[ ! -f "$st/sums" ] || { echo APPLIED; exit 7; }
rm -rf -- "$st"; (umask 077 && mkdir -p -- "$st/orig" "$st/stage") || exit 1  # backups: ours
if [ "$diff" = - ]; then mv -f -- "$st.diff" "$st/patch.diff"
else printf %s "$diff" | base64 -d > "$st/patch.diff"; fi || { rm -rf -- "$st"; exit 1; }
fail() { clean "$@"; rm -rf -- "$st"; exit "$code"; }
command -v patch >/dev/null || { echo "E 0 patch is not installed"; rm -rf -- "$st"; exit 3; }
cd -- "$root" 2>/dev/null || { echo "E 0 is not a directory"; rm -rf -- "$st"; exit 3; }
stage() {
  i=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2
    if [ -L "$t" ]; then echo "E $i is a symbolic link"; return 3; fi
    mkdir -p -- "$(dirname -- "$s")" || return 1
    if [ "$k" = C ]; then
      [ ! -e "$t" ] || { echo "E $i already exists"; return 3; }
      [ -d "$(dirname -- "$t")" ] || { echo "E $i has no parent directory"; return 3; }
    else
      [ -f "$t" ] || { echo "E $i does not exist"; return 3; }
      { cp -p -- "$t" "$st/orig/$i" && cp -p -- "$t" "$s"; } \
        || { echo "E $i cannot be read"; return 3; }
    fi
    echo "$i $(sum "$t")" >> "$st/before"
  done
}
install() {
  i=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2
    b=$(sed -n "${i}p" "$st/before" | cut -d" " -f2)
    [ "$(sum "$t")" = "$b" ] || { echo "E $i changed while the patch was applied"; return 5; }
    if [ "$k" = D ]; then
      [ ! -e "$s" ] || { echo "E $i was not deleted by patch"; return 4; }; a=-
    else
      [ -f "$s" ] || { echo "E $i was not produced by patch"; return 4; }; a=$(sum "$s")
      cp -p -- "$s" "$t.bisect-new" || { echo "E $i cannot be written"; return 3; }
    fi
    echo "$i $b $a" >> "$st/sums.tmp"
  done
}
place() {
  i=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2
    if [ "$k" = D ]; then rm -f -- "$t"; else mv -f -- "$t.bisect-new" "$t"; fi
    echo "S $i $b $a $(sum "$t")"
  done
}
stage "$@" || { code=$?; fail "$@"; }
out=$(cd -- "$st/stage" && patch -p"$strip" --batch --forward --fuzz=0 \
      --no-backup-if-mismatch --reject-file=- -i ../patch.diff 2>&1) \
  || { echo P; printf "%s\n" "$out"; code=4; fail "$@"; }
if [ "$mode" = check ]; then rm -rf -- "$st"; echo CHECKED; exit 0; fi
install "$@" || { code=$?; fail "$@"; }
# The commit point: from here on the record on the node says how to undo every rename.
mv -f -- "$st/sums.tmp" "$st/sums" || { code=1; fail "$@"; }
rm -rf -- "$st/stage"
place "$@"
"""

_REVERT = r"""
st=$1; root=$2; shift 2
case $st in /*) ;; *) st=$PWD/$st;; esac
[ -f "$st/sums" ] || { rm -rf -- "$st"; echo NONE; exit 0; }
cd -- "$root" 2>/dev/null || { echo "E 0 is not a directory"; exit 3; }
check() {
  i=0; bad=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2; c=$(sum "$t")
    [ "$c" = "$a" ] || [ "$c" = "$b" ] || { echo "X $i $c $a"; bad=5; }
  done
  return $bad
}
copy() {
  i=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2
    if [ "$(sum "$t")" != "$b" ] && [ "$b" != - ]; then
      cp -p -- "$st/orig/$i" "$t.bisect-old" || return 1
    fi
  done
}
place() {
  i=0; bad=0
  while [ $# -gt 0 ]; do
    next "$@"; shift 2
    if [ "$(sum "$t")" != "$b" ]; then
      if [ "$b" = - ]; then rm -f -- "$t"; else mv -f -- "$t.bisect-old" "$t"; fi
    fi
    c=$(sum "$t"); [ "$c" = "$b" ] || { echo "V $i $c $b"; bad=6; }
  done
  return $bad
}
# Check every file first: nothing is touched unless every file can be restored.
check "$@" || exit 5
copy "$@" || { clean "$@"; echo "E 0 cannot copy the backups back"; exit 3; }
place "$@" || exit 6
rm -rf -- "$st"
echo DONE
"""

_FAILED = re.compile(r"FAILED|can't find file|Reversed|already exists|malformed|Only garbage")


@dataclass(frozen=True)
class FilePatch:
    """``diff`` applied under ``root`` (like ``patch -p{strip} -d root``) on one node whose
    bisect-owned workdir is ``workdir``. Contexts must match exactly (no fuzz): a bisection must
    not run code nobody wrote. Line offsets are accepted."""

    diff: str
    root: str
    workdir: str
    strip: int = 1
    kind: str = field(default="patch", init=False)
    stack_order: int = field(default=1, init=False)  # after any checkout: it may patch its files
    tree: str | None = field(default=None, init=False)  # moves no git HEAD
    files: tuple[Target, ...] = field(default=(), init=False, compare=False)

    def __post_init__(self) -> None:
        if not self.root.startswith("/"):
            raise ValueError(f"patch root must be an absolute path, not {self.root!r}")
        object.__setattr__(self, "files", tuple(targets(self.diff, self.strip)))  # DiffError

    @property
    def _digest(self) -> str:
        return digest(self.root, str(self.strip), self.diff)

    @property
    def fingerprint(self) -> str:
        return f"patch:{self._digest[:16]}"

    @property
    def state(self) -> str:
        return state_path(self.workdir, f"patch-{self._digest[:16]}")

    def _args(self) -> list[str]:
        return [value for target in self.files for value in (target.kind, target.path)]

    def _name(self, index: str) -> str:
        number = int(index)
        return self.root if number == 0 else f"{self.root}/{self.files[number - 1].path}"

    def _run_apply(self, transport: Transport, state: str, mode: str) -> list[str]:
        diff = payload(transport, f"{state}.diff", self.diff.encode())
        result = run_sh(transport, _COMMON + _APPLY, [state, self.root, str(self.strip), diff,
                                                      mode, *self._args()], timeout_s=120)
        lines = result.stdout.splitlines()
        if result.returncode == 7:
            raise ChangeError(transport.node, f"{self.fingerprint} is already applied under "
                                              f"{self.root} (record in {state}); revert it first")
        if not result.ok:
            raise ChangeError(transport.node,
                              self._apply_error(result.returncode, lines, result.stderr))
        return lines

    def check(self, transport: Transport) -> None:
        """Would it apply to the files as they are now? The whole apply up to the renames, in a
        scratch directory: for preflight, before any trial. (A patch meant to stack on another
        one's changes to the same file only applies after that one.)"""
        self._run_apply(transport, f"{self.state}-check", "check")

    def apply(self, transport: Transport) -> Applied:
        node = transport.node
        lines = self._run_apply(transport, self.state, "apply")
        files = {}
        for line in lines:
            if line.startswith("S "):
                _, index, before, after, now = line.split()
                if now != after:
                    raise ChangeError(node, f"{self._name(index)}: sha256 {now} after the "
                                            f"rename, expected {after}")
                files[self.files[int(index) - 1].path] = {"before": before, "after": after}
        if len(files) != len(self.files):
            raise ChangeError(node, f"patch {self.fingerprint}: incomplete report {lines!r}")
        # A deleted file ("-" after) has nothing to hash: the proof checks the files that exist.
        expected = Expected({f"{self.root}/{path}": sums["after"] for path, sums in files.items()
                             if sums["after"] != "-"})
        return Applied(self.kind, node, self.fingerprint,
                       {"root": self.root, "state": self.state, "files": files}, expected)

    def _apply_error(self, code: int, lines: list[str], stderr: str) -> str:
        head = f"patch {self.fingerprint} not applied under {self.root} (node unchanged)"
        if code == 4 and lines[:1] == ["P"]:
            output = lines[1:]
            culprits, current = [], ""
            for line in output:
                if line.startswith("patching file "):
                    current = line[len("patching file "):].strip("'\"")
                elif _FAILED.search(line) and current and current not in culprits:
                    culprits.append(current)
            where = ", ".join(f"{self.root}/{c}" for c in culprits) or "its files"
            return f"{head}: does not apply to {where}: {tail(chr(10).join(output), 1500)}"
        for line in lines:
            if line.startswith("E "):
                _, index, reason = line.split(" ", 2)
                return f"{head}: {self._name(index)} {reason}"
        return f"{head}: exit {code}: {tail(stderr or chr(10).join(lines), 500)}"

    def revert(self, transport: Transport) -> bool:
        node = transport.node
        result = run_sh(transport, _COMMON + _REVERT, [self.state, self.root, *self._args()],
                        timeout_s=120)
        lines = result.stdout.splitlines()
        if result.ok:
            return lines[-1:] == ["DONE"]
        changed = [line.split() for line in lines if line[:2] in ("X ", "V ")]
        if result.returncode == 5 and changed:
            detail = "; ".join(f"{self._name(i)} (sha256 now {now}, the patch left {want})"
                               for _, i, now, want in changed)
            raise ChangeError(node, f"refusing to revert {self.fingerprint}: changed since it "
                                    f"was applied, by someone else: {detail}. Nothing was "
                                    f"touched; the backups stay in {self.state}")
        if result.returncode == 6 and changed:
            detail = "; ".join(f"{self._name(i)} (sha256 {now}, expected {want})"
                               for _, i, now, want in changed)
            raise ChangeError(node, f"revert of {self.fingerprint} did not restore {detail}")
        reason = next((line.split(" ", 2)[2] for line in lines if line.startswith("E ")),
                      tail(result.stderr, 300))
        raise ChangeError(node, f"cannot revert {self.fingerprint} under {self.root}: {reason}")
