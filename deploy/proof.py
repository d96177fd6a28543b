"""Proof that a variant is really loaded: what the running process IS, not what /health says.

In the seed investigation a health check passed while stale code ran. So after a restart we read,
on the node and in one round trip, the process's own record of how it was started — its exact
argv (``/proc/PID/cmdline``), its initial environment (``/proc/PID/environ``), its start time —
plus the hashes of the files the variant deployed and the git tree's commit, and we compare all
of it with what the variant says. Every mismatch is one specific sentence in ``Proof.problems``.

A start command may be a launcher (a wrapper script, ``bash -c '… exec … "$@"'``, ``conda run``):
then the process proven is the one the launcher exec'd or spawned whose command line carries the
variant's flags (deploy.launchers), and ``checks["proved"]`` says which, with its argv.

The script gets every value as a positional argument (never inside its text), so paths and
names from a campaign cannot inject shell. Binary data (argv, environ) travels as ``od`` hex:
values may contain newlines or invalid UTF-8, and a transport decodes text.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploy.launchers import (
    Process,
    descendants,
    flag_problems,
    resembling,
    server,
    shell_hint,
)
from deploy.services.base import ServiceConfig
from deploy.transports.base import Transport, TransportError

# /proc/stat's btime is whole seconds (truncated), so a computed start time is up to 1 s EARLIER
# than the true one, never later: "started before X" is certain only when it is 1 s before.
_BTIME_RESOLUTION_S = 1.0
_SHOW = 80  # values in sentences are cut to this many characters
_SHOW_ARGV = 600  # a command line is long and its differing part may be at the end
_DESCENDANTS = 16  # the nearest a launcher's server is looked for among (SGLang's own: ~10)

# `_s NAME CMD...` prints one section: its output (stderr too: it explains failures) and exit
# code, between lines holding $B, a boundary random per call (a file or a log cannot forge it).
SECTIONS_SH = r"""
_s() {
  _k=$1; shift; printf '%s %s\n' "$B" "$_k"
  "$@" 2>&1; _r=$?; printf '\n%s end %s\n' "$B" "$_r"
}
"""
# Every process's "PID PPID" (comm, in parentheses, may hold anything but ends at the last ")"):
# where a launcher's server is, when it spawned one instead of exec'ing it.
TREE_SH = r"""
_tree() {
  cat /proc/[0-9]*/stat 2>/dev/null | sed -n 's/^\([0-9]*\) (.*) [A-Za-z] \([0-9]*\) .*/\1 \2/p'
}
"""
_SCRIPT = SECTIONS_SH + TREE_SH + r"""
B=$1; p=$2; n=$3; shift 3
_hex() { od -An -v -tx1 "$1"; }
_sha() { sha256sum < "$1"; }
_mtime() { stat -c %.9Y -- "$1" 2>/dev/null || stat -c %Y -- "$1"; }
_s stat cat "/proc/$p/stat"
_s cmdline _hex "/proc/$p/cmdline"
_s environ _hex "/proc/$p/environ"
_s btime sed -n 's/^btime //p' /proc/stat
_s clk getconf CLK_TCK
_s now date +%s.%N
_s tree _tree
i=0
while [ "$i" -lt "$n" ]; do
  _s "sha$i" _sha "$1"; _s "mtime$i" _mtime "$1"; shift; i=$((i+1))
done
if [ "$#" -gt 0 ]; then
  _s head git -C "$1" rev-parse HEAD --show-toplevel
  _s status git -C "$1" status --porcelain -z --untracked-files=no
  _s moved git -C "$1" log -g -1 --date=unix --format=%gd HEAD
fi
"""
_ARGVS = SECTIONS_SH + r"""
B=$1; shift
for p in "$@"; do _s "argv$p" od -An -v -tx1 "/proc/$p/cmdline"; done
"""


@dataclass(frozen=True)
class Proof:
    """``checks`` holds what was observed (JSON-able, for the store); never the whole environ:
    it may hold secrets, so only the variables the variant sets are recorded."""

    ok: bool
    problems: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    rc: int
    text: str


def node_clock(transport: Transport, *, timeout_s: float = 30.0) -> float:
    """The node's wall clock (epoch seconds). Take ``deployed_at_epoch`` from it, just before
    the restart: the start time is read on the node, so the controller's clock skew never counts."""
    out = transport.run(["date", "+%s.%N"], timeout_s=timeout_s).check().stdout.strip()
    try:
        return float(out)
    except ValueError:  # a date without %N (busybox) prints it literally: whole seconds then
        return float(out.split(".")[0])


def new_boundary() -> str:
    return "@@" + secrets.token_hex(16)


def parse_sections(stdout: str, boundary: str) -> dict[str, Section]:
    pattern = re.compile(rf"{boundary} (\S+)\n(.*?)\n{boundary} end (\d+)\n", re.DOTALL)
    return {m[1]: Section(int(m[3]), m[2]) for m in pattern.finditer(stdout)}


def _unhex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


def _show(value: str | bytes, limit: int = _SHOW) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _about(seconds: float) -> str:
    """A duration measured with ±0.5 s (the midpoint of a start time known to 1 s)."""
    return f"about {max(seconds, 0.0):.0f} s"


def _why(section: Section | None) -> str:
    if section is None:
        return "no answer from the node"
    return section.text.strip().splitlines()[-1] if section.text.strip() else f"exit {section.rc}"


def _argv_problem(actual: list[bytes], expected: list[bytes], own: int,
                  described: Process, main_pid: int) -> str:
    """Why no process carries the variant, said of the one most like its server."""
    who = ("the process" if described.pid == main_pid
           else f"process {described.pid} (started under {main_pid})")
    running = _show(shlex.join(a.decode(errors="replace") for a in actual), _SHOW_ARGV)
    flags = expected[own:]
    if flags and (parts := flag_problems(actual, flags)):
        return (f"the command line differs from the variant's ({'; '.join(parts)}): "
                f"{who} runs {running}{shell_hint(expected, own)}")
    launched = os.path.basename(actual[0]) != os.path.basename(expected[0]) if actual else False
    if flags and launched:  # all there, in a launcher's server, but not last: one may be undone
        return (f"the variant's flags are not the last arguments of the command line: {who} "
                f"runs {running}")
    missing = [a for a in expected if a not in actual]
    extra = [a for a in actual if a not in expected]
    if not missing and not extra:
        return f"the process has the variant's arguments in another order: {running}"
    parts = [f"missing {_show(a)!r}" for a in missing[:3]] + [
        f"unexpected {_show(a)!r}" for a in extra[:3]]
    return (f"the command line differs from the variant's ({'; '.join(parts)}): "
            f"{who} runs {running}")


def argv_of(section: Section | None) -> list[bytes] | None:
    if section is None or section.rc != 0:
        return None
    return _unhex(section.text).split(b"\0")[:-1]  # cmdline ends with a NUL


def _alive(section: Section | None) -> bool:
    fields = section.text.rsplit(")", 1)[-1].split() if section and section.rc == 0 else []
    return len(fields) >= 20 and fields[0] not in ("Z", "X")


def _find_server(transport: Transport, sec: dict[str, Section], pid: int, want: list[bytes],
                 own: int, timeout_s: float
                 ) -> tuple[int, dict[str, Section], dict[str, Any] | None, str | None]:
    """The process to prove (the started one, or the server a launcher spawned under it), its
    sections, what says it carries the variant, and else why none does."""
    main = argv_of(sec.get("cmdline"))
    if main is None or not _alive(sec.get("stat")):
        return pid, sec, None, None  # gone or unreadable: the process checks say so
    processes = [Process(pid, 0, 0, tuple(main))]
    tree = sec.get("tree")
    kids = descendants(tree.text, pid, _DESCENDANTS) if tree is not None and tree.rc == 0 else []
    if kids:  # one more round trip, only for a process that has children
        boundary = new_boundary()
        result = transport.run(["sh", "-c", _ARGVS, "sh", boundary, *(str(k) for k, _, _ in kids)],
                               timeout_s=timeout_s)
        argvs = parse_sections(result.stdout, boundary)
        processes += [Process(k, parent, depth,
                              None if (a := argv_of(argvs.get(f"argv{k}"))) is None else tuple(a))
                      for k, parent, depth in kids]
    found = server(processes, want, own)
    if found is None:
        described = resembling(processes, want) or processes[0]
        return pid, sec, None, _argv_problem(list(described.argv or main), want, own, described,
                                             pid)
    process, how = found
    proved = {"pid": process.pid, "argv": [a.decode(errors="replace") for a in process.argv or ()],
              "how": how.how, "launcher": list(how.launcher)}
    if process.pid == pid:
        return pid, sec, proved, None
    boundary = new_boundary()  # the server's own record: its start time and environment
    result = transport.run(["sh", "-c", _SCRIPT, "sh", boundary, str(process.pid), "0"],
                           timeout_s=timeout_s)
    return process.pid, parse_sections(result.stdout, boundary), proved, None


def _process_checks(sec: dict[str, Section], pid: int, expected: ServiceConfig,
                    argv_problem: str | None, deployed_at: float, slack_s: float,
                    problems: list[str], checks: dict[str, Any]) -> float | None:
    """argv, env and start time; returns the start epoch (a lower bound) when it is known."""
    stat = sec.get("stat")
    fields = stat.text.rsplit(")", 1)[-1].split() if stat and stat.rc == 0 else []
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        state = "exited (a zombie)" if fields else f"is not running ({_why(stat)})"
        problems.append(f"process {pid} {state}: nothing to prove")
        checks["alive"] = False
        return None
    checks["alive"] = True
    cmdline, environ = sec.get("cmdline"), sec.get("environ")
    if cmdline is None or cmdline.rc != 0:
        problems.append(f"cannot read the command line of process {pid}: {_why(cmdline)}")
    else:
        checks["argv"] = [a.decode(errors="replace") for a in argv_of(cmdline) or ()]
        if argv_problem:
            problems.append(argv_problem)
    if environ is None or environ.rc != 0:
        problems.append(f"cannot read the environment of process {pid}: {_why(environ)}")
    else:
        env: dict[bytes, bytes] = {}
        for entry in _unhex(environ.text).split(b"\0"):
            name, sep, value = entry.partition(b"=")
            if sep:
                env.setdefault(name, value)  # getenv() returns the first of duplicates
        checks["env"] = {}
        for key, want in expected.env:
            got = env.get(key.encode())
            checks["env"][key] = None if got is None else got.decode(errors="replace")
            if got is None:
                problems.append(f"env {key} is not set in the process, the variant sets "
                                f"{_show(want)!r}")
            elif got != want.encode():
                problems.append(f"env {key} is {_show(got)!r}, the variant sets {_show(want)!r}")
    try:
        start = float(sec["btime"].text) + int(fields[19]) / int(sec["clk"].text)
    except (KeyError, ValueError, ZeroDivisionError):
        problems.append(f"cannot tell when process {pid} started: {_why(sec.get('btime'))}")
        return None
    checks["started_at"] = start
    early = deployed_at - (start + _BTIME_RESOLUTION_S + slack_s)
    if early > 0:
        ago = _about(deployed_at - start - 0.5)
        problems.append(f"the process started {ago} before the deploy: it was not restarted")
    return start


def prove_loaded(
    transport: Transport,
    pid: int,
    expected: ServiceConfig,
    *,
    deployed_at_epoch: float,
    log_text: str,
    markers: Sequence[str],
    absent_markers: Sequence[str] = (),
    files: Mapping[str, str] | None = None,
    git: tuple[str, str] | None = None,
    clock_slack_s: float = 0.0,
    timeout_s: float = 30.0,
    start_words: int | None = None,
) -> Proof:
    """Check that process ``pid`` on the node is the variant ``expected``, started after
    ``deployed_at_epoch`` (node clock: see ``node_clock``; else pass the skew as
    ``clock_slack_s``). ``log_text``: this start's log only. ``files``: path → sha256 the variant
    deployed. ``git``: (tree, commit or a prefix of it) the tree must be at, clean.
    ``start_words``: how many words of ``expected.argv`` are the service's start command (the
    rest are its levels' flags, which must reach the server through any launcher); None: all.
    Raises TransportError only when the node cannot be asked at all."""
    files = dict(files or {})
    boundary = new_boundary()
    argv = ["sh", "-c", _SCRIPT, "sh", boundary, str(int(pid)), str(len(files)), *files]
    if git is not None:
        argv.append(git[0])
    result = transport.run(argv, timeout_s=timeout_s)
    sec = parse_sections(result.stdout, boundary)
    if "now" not in sec:  # the script did not run through: not an observation of the process
        raise TransportError(f"{transport.node}: the proof script failed: "
                             f"{(result.stderr or result.stdout).strip()[-300:]}")
    problems: list[str] = []
    checks: dict[str, Any] = {"pid": pid, "deployed_at": deployed_at_epoch}
    with contextlib.suppress(ValueError):
        checks["node_now"] = float(sec["now"].text.strip())
    wanted = [a.encode() for a in expected.argv]
    own = len(wanted) if start_words is None else start_words
    server_pid, server_sec, proved, argv_problem = _find_server(transport, sec, pid, wanted, own,
                                                                timeout_s)
    if proved is not None:
        checks["proved"] = proved
    start = _process_checks(server_sec, server_pid, expected, argv_problem, deployed_at_epoch,
                            clock_slack_s, problems, checks)

    checks["markers"] = {m: m in log_text for m in markers}
    empty = " (this start's log is empty)" if not log_text.strip() else ""
    problems += [f"marker {m!r} not in this start's log{empty}" for m in markers
                 if m not in log_text]
    checks["absent_markers"] = {m: m not in log_text for m in absent_markers}
    problems += [f"marker {m!r} is in this start's log, the variant says it must not be"
                 for m in absent_markers if m in log_text]

    checks["files"] = {}
    for index, (path, want) in enumerate(files.items()):
        digest, mtime = sec.get(f"sha{index}"), sec.get(f"mtime{index}")
        if digest is None or digest.rc != 0:
            problems.append(f"cannot hash {path} on {transport.node}: {_why(digest)}")
            continue
        got = digest.text.split()[0] if digest.text.split() else ""
        seen: dict[str, Any] = {"sha256": got}
        if got != want.lower():
            problems.append(f"{path} has sha256 {got[:12]}…, the variant expects {want[:12]}…: "
                            f"the file on the node is not the deployed one")
        if mtime is not None and mtime.rc == 0:
            seen["mtime"] = changed = float(mtime.text.strip())
            # Certain only past the start time's 1 s uncertainty (see _BTIME_RESOLUTION_S).
            if start is not None and changed > start + _BTIME_RESOLUTION_S:
                problems.append(f"{path} changed {_about(changed - start - 0.5)} after the process "
                                f"started: the running code predates it (not restarted since "
                                f"the change)")
        checks["files"][path] = seen

    if git is not None:
        problems += _git_checks(sec, git, start, set(files), checks)
    return Proof(not problems, problems, checks)


def _dirty(porcelain: str, top: str, verified: set[str]) -> list[str]:
    """Changed tracked files (``status -z``: any byte in names), except those whose hashes the
    proof verifies: a patch variant changes them in the tree on purpose."""
    dirty: list[str] = []
    skip = False
    for entry in porcelain.split("\0"):
        if skip or len(entry) < 4:
            skip = False
            continue
        skip = entry[0] in "RC"  # a rename or copy: the next entry is the old name
        if f"{top}/{entry[3:]}" not in verified:
            dirty.append(entry[3:])
    return dirty


def _git_checks(sec: dict[str, Section], git: tuple[str, str], start: float | None,
                verified: set[str], checks: dict[str, Any]) -> list[str]:
    tree, want = git
    head, status, moved = sec.get("head"), sec.get("status"), sec.get("moved")
    if head is None or head.rc != 0:
        return [f"cannot read the commit of git tree {tree}: {_why(head)}"]
    problems: list[str] = []
    got, _, top = head.text.strip().partition("\n")
    seen: dict[str, Any] = {"tree": tree, "head": got}
    if len(want) < 7 or not got.startswith(want.lower()):
        problems.append(f"git tree {tree} is at {got[:12]}, the variant expects {want[:12]}")
    if status is None or status.rc != 0:
        problems.append(f"cannot read the status of git tree {tree}: {_why(status)}")
    # Untracked files are left out: build outputs and logs are common, and a new module is
    # only imported if a tracked file (which would show here) imports it.
    elif dirty := _dirty(status.text, top.strip(), verified):
        seen["dirty"] = dirty
        problems.append(f"git tree {tree} has uncommitted changes to tracked files: "
                        f"{', '.join(_show(d) for d in dirty[:5])}"
                        f"{' …' if len(dirty) > 5 else ''}")
    found = re.search(r"\{(\d+)\}", moved.text) if moved is not None and moved.rc == 0 else None
    if found:  # the reflog's time of the last HEAD move: a checkout after the start is stale
        seen["moved_at"] = at = float(found[1])
        if start is not None and at > start + _BTIME_RESOLUTION_S:
            problems.append(f"git tree {tree} moved to {got[:12]} {_about(at - start)} after the "
                            f"process started: the running code predates it (not restarted "
                            f"since the change)")
    checks["git"] = seen
    return problems
