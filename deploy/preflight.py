"""Preflight: check every node before anything changes, and report every problem at once.

A campaign that fails on its 17th trial because node B's build does not know a flag of factor
C wastes hours; so before the first deploy: is each node reachable, does each start command
exist, does the node's own build accept every flag any variant will pass (its ``--help``, since
flag names drift between SGLang versions), is there disk space for the logs. And we snapshot
what is there now (running services, the files the campaign will touch) so the nodes can be left
as they were found. One survey script per node plus one ``--help`` per (node, start command);
nodes are checked in parallel.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from deploy.proof import SECTIONS_SH, new_boundary, parse_sections
from deploy.safe_words import check_argv, check_environment, program_error
from deploy.services.process import ProcessServiceManager
from deploy.transports.base import Transport, TransportError

DEFAULT_MIN_FREE_BYTES = 1 << 30  # logs of a long campaign at debug level reach hundreds of MB
MAX_SNAPSHOT_BYTES = 1 << 20  # files a campaign touches are configs; more cannot be restored
_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9_-]*")


def help_flags(text: str) -> frozenset[str]:
    """The ``--flags`` a ``--help`` output names (argparse's usage and option lines alike)."""
    return frozenset(_FLAG.findall(text))

# The survey: every value is a positional argument, grouped as COUNT VALUE...; each answer is a
# section delimited by a per-call random boundary (see deploy/proof.py).
_SURVEY = SECTIONS_SH + r"""
B=$1; shift
_exe() { case $1 in */*) [ -f "$1" ] && [ -x "$1" ] && echo "$1" ;; *) command -v -- "$1" ;; esac; }
_df() { _d=$1; while [ ! -e "$_d" ]; do _d=$(dirname -- "$_d"); done; df -Pk -- "$_d"; }
_pid() {
  [ -f "$1" ] || { echo none; return 0; }
  _p=""; read -r _p _ < "$1" || [ -r "$1" ] || return 1  # the pid, its start time and token
  case $_p in ''|*[!0-9]*) echo "garbage"; return 0 ;; esac
  _l=$(cat "/proc/$_p/stat" 2>/dev/null) || { echo "$_p gone"; return 0; }
  set -- ${_l##*) }; echo "$_p $1"; od -An -v -tx1 "/proc/$_p/cmdline" 2>/dev/null || true
}
_file() {
  [ -e "$1" ] || { echo absent; return 0; }
  [ -f "$1" ] || { echo notfile; return 0; }
  _size=$(wc -c < "$1") || return 1
  [ "$_size" -le "$2" ] || { echo "toobig $_size"; return 0; }
  echo "mode $(stat -c %a -- "$1")" && od -An -v -tx1 -- "$1"
}
for _kind in exe df pid file; do
  _count=$1; shift; _i=0  # shell variables are global: names no function uses
  while [ "$_i" -lt "$_count" ]; do
    if [ "$_kind" = file ]; then _s "file$_i" _file "$1" "$MAXB"
    else _s "$_kind$_i" "_$_kind" "$1"; fi
    shift; _i=$((_i+1))
  done
done
"""


@dataclass(frozen=True)
class LevelFlags:
    """The flags one level of one factor adds to a service (as the campaign declares them)."""

    factor: str
    level: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class ServiceCheck:
    name: str
    argv: tuple[str, ...]  # the start command before any level's flags
    workdir: str  # where its pid file and log live (the process manager's workdir)
    levels: tuple[LevelFlags, ...] = ()  # every level that adds flags to this service
    env: tuple[tuple[str, str], ...] = ()  # the service's base env, also given to --help
    help_argv: tuple[str, ...] | None = None  # default: argv up to its first --flag

    def __post_init__(self) -> None:
        # `env -- NAME=VALUE... PROGRAM --help` runs on the node: the same rules as a start.
        what = f"service {self.name}"
        check_environment(self.env, what)
        check_argv((*self.argv, *(self.help_argv or ())), what)
        for level in self.levels:
            check_argv(level.flags, f"{what}, factor {level.factor}, level {level.level}")
        error = program_error((self.help_argv or self.argv or ("",))[0])
        if error:
            raise ValueError(f"{what}: {error}")


@dataclass(frozen=True)
class NodeCheck:
    name: str
    transport: Transport
    services: tuple[ServiceCheck, ...]
    files: tuple[str, ...] = ()  # files the campaign will write on this node: snapshotted
    min_free_bytes: int = DEFAULT_MIN_FREE_BYTES
    build: str = ""  # what identifies the node's build (a commit): part of the --help cache key


@dataclass(frozen=True)
class Problem:
    node: str
    service: str | None
    kind: str  # unreachable | executable | help | flag | disk | file
    message: str  # a whole sentence, naming the node

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ServiceSnapshot:
    name: str
    pid_file: str
    pid: int | None  # from the pid file
    running: bool  # that pid is alive (not a zombie)
    cmdline: tuple[str, ...] | None  # what it runs, when running


@dataclass(frozen=True)
class FileSnapshot:
    path: str
    exists: bool
    content: bytes | None = None  # None when absent (restore = delete) or not readable
    sha256: str | None = None
    mode: int | None = None  # permission bits, to restore them too


@dataclass(frozen=True)
class NodeSnapshot:
    node: str
    services: tuple[ServiceSnapshot, ...] = ()
    files: tuple[FileSnapshot, ...] = ()


@dataclass(frozen=True)
class Preflight:
    problems: list[Problem]
    snapshots: dict[str, NodeSnapshot]  # by node; absent for an unreachable node

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class HelpCache:
    """The flag names each (node, build, command, env) accepts; keep one across preflights of
    a campaign so a re-check (resume) does not pay a ~10 s SGLang import per node again."""

    flags: dict[tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...]], frozenset[str]] = (
        field(default_factory=dict))
    lock: threading.Lock = field(default_factory=threading.Lock)


def help_argv(service: ServiceCheck) -> tuple[str, ...]:
    """``python -m sglang.launch_server --port 1`` → ``python -m sglang.launch_server``."""
    if service.help_argv is not None:
        return service.help_argv
    for index, arg in enumerate(service.argv):
        if index and arg.startswith("--"):
            return service.argv[:index]
    return service.argv


def flag_names(args: Sequence[str]) -> list[str]:
    """The ``--flag`` names in an argv fragment (``--x=1`` counts as ``--x``); values skipped."""
    return [arg.split("=", 1)[0] for arg in args if _FLAG.fullmatch(arg.split("=", 1)[0])]


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "no output"


def _available_bytes(df_output: str) -> int | None:
    # df -P: "FS 1024-blocks Used Available Capacity% Mounted-on"; names may hold spaces.
    found = re.search(r"(\d+)\s+(\d+)\s+(\d+)\s+\d+%", df_output.split("\n", 1)[-1])
    return int(found[3]) * 1024 if found else None


def _survey(node: NodeCheck, problems: list[Problem]) -> NodeSnapshot:
    workdirs = sorted({s.workdir for s in node.services})
    pid_files = [ProcessServiceManager(node.transport, s.workdir).pid_file(s.name)
                 for s in node.services]
    boundary = new_boundary()
    script = f"MAXB={MAX_SNAPSHOT_BYTES}\n{_SURVEY}"
    argv = ["sh", "-c", script, "sh", boundary]
    for values in ([s.argv[0] for s in node.services], workdirs, pid_files, list(node.files)):
        argv += [str(len(values)), *values]
    result = node.transport.run(argv, timeout_s=60)
    sec = {k: (v.rc, v.text) for k, v in parse_sections(result.stdout, boundary).items()}
    if not result.ok or len(sec) != len(argv) - 5 - 4:
        raise TransportError(f"{node.name}: the preflight survey failed: "
                             f"{_last_line(result.stderr or result.stdout)}")

    def add(service: str | None, kind: str, message: str) -> None:
        problems.append(Problem(node.name, service, kind, message))

    for index, service in enumerate(node.services):
        rc, _ = sec[f"exe{index}"]
        if rc != 0:
            add(service.name, "executable",
                f"{node.name}: the start command of {service.name}, {service.argv[0]!r}, is not "
                f"an executable file there (nor found on the PATH of its shell)")
    for index, workdir in enumerate(workdirs):
        rc, text = sec[f"df{index}"]
        free = _available_bytes(text) if rc == 0 else None
        if free is None:
            add(None, "disk", f"{node.name}: cannot tell the free space in {workdir}: "
                              f"{_last_line(text)}")
        elif free < node.min_free_bytes:
            add(None, "disk", f"{node.name}: only {free / 2**30:.2f} GiB free in {workdir}, the "
                              f"campaign needs {node.min_free_bytes / 2**30:.2f} GiB for logs")
    services = tuple(_service_snapshot(s.name, pid_files[i], sec[f"pid{i}"])
                     for i, s in enumerate(node.services))
    files = []
    for index, path in enumerate(node.files):
        snap, trouble = _file_snapshot(path, *sec[f"file{index}"])
        files.append(snap)
        if trouble:
            add(None, "file", f"{node.name}: {path} {trouble}")
    return NodeSnapshot(node.name, services, tuple(files))


def _service_snapshot(name: str, pid_file: str, answer: tuple[int, str]) -> ServiceSnapshot:
    first, _, rest = answer[1].partition("\n")
    words = first.split()
    if answer[0] != 0 or len(words) != 2 or not words[0].isdigit():
        return ServiceSnapshot(name, pid_file, None, False, None)
    running = words[1] not in ("Z", "X", "gone")
    argv = bytes.fromhex("".join(rest.split())).split(b"\0")[:-1] if running else []
    cmdline = tuple(a.decode(errors="replace") for a in argv) if running else None
    return ServiceSnapshot(name, pid_file, int(words[0]), running, cmdline)


def _file_snapshot(path: str, rc: int, text: str) -> tuple[FileSnapshot, str | None]:
    first, _, rest = text.partition("\n")
    if rc == 0 and first == "absent":
        return FileSnapshot(path, False), None
    if rc == 0 and first.startswith("mode "):
        content = bytes.fromhex("".join(rest.split()))
        return FileSnapshot(path, True, content, hashlib.sha256(content).hexdigest(),
                            int(first.split()[1], 8)), None
    if rc == 0 and first.startswith("toobig "):
        trouble = (f"is {int(first.split()[1]):,} bytes, over the {MAX_SNAPSHOT_BYTES:,}-byte "
                   f"snapshot limit: it could not be restored after the campaign")
    elif rc == 0 and first == "notfile":
        trouble = "is not a regular file: the campaign cannot write it"
    else:
        trouble = f"cannot be read: {_last_line(text)}"
    return FileSnapshot(path, True), trouble


def _help_flags(node: NodeCheck, service: ServiceCheck, cache: HelpCache,
                problems: list[Problem]) -> frozenset[str] | None:
    command = help_argv(service)
    key = (node.name, node.build, command, service.env)
    with cache.lock:
        if key in cache.flags:
            return cache.flags[key]
    env = [f"{k}={v}" for k, v in service.env]
    shown = shlex.join([*command, "--help"])
    # Through `env` so the base environment applies (PYTHONPATH, a venv), as at start; after
    # `--` no word is an option of env's (`-S...` would be a command line it runs).
    result = node.transport.run(["env", "--", *env, *command, "--help"], timeout_s=180)
    flags = help_flags(result.stdout + "\n" + result.stderr)
    if not result.ok or not flags:
        why = f"exited {result.returncode}" if not result.ok else "lists no --flags"
        problems.append(Problem(node.name, service.name, "help",
                                f"{node.name}: cannot list the flags of its build: `{shown}` "
                                f"{why}: {_last_line(result.stderr or result.stdout)}"))
        return None  # not cached: a failure may be transient
    with cache.lock:
        cache.flags[key] = flags
    return flags


def _check_flags(node: NodeCheck, service: ServiceCheck, known: frozenset[str],
                 problems: list[Problem]) -> None:
    shown = shlex.join([*help_argv(service), "--help"])
    base = service.argv[len(help_argv(service)):]
    for flag in dict.fromkeys(flag_names(base)):
        if flag not in known:
            problems.append(Problem(node.name, service.name, "flag",
                                    f"{node.name}: the start command of {service.name} passes "
                                    f"{flag}, which `{shown}` there does not list"))
    for level in service.levels:
        for flag in dict.fromkeys(flag_names(level.flags)):
            if flag not in known:
                problems.append(Problem(
                    node.name, service.name, "flag",
                    f"{node.name}: factor {level.factor}, level {level.level} passes {flag} to "
                    f"{service.name}, which `{shown}` there does not list (the flag names of "
                    f"that build)"))


def _check_node(node: NodeCheck, cache: HelpCache) -> tuple[list[Problem], NodeSnapshot | None]:
    problems: list[Problem] = []
    try:
        snapshot = _survey(node, problems)
        missing = {p.service for p in problems if p.kind == "executable"}
        for service in node.services:
            if service.name not in missing:  # its --help could not run either
                known = _help_flags(node, service, cache, problems)
                if known is not None:
                    _check_flags(node, service, known, problems)
    except TransportError as exc:
        # The transport's sentence already names the node and the cause.
        return [*problems, Problem(node.name, None, "unreachable", str(exc))], None
    return problems, snapshot


def preflight(nodes: Sequence[NodeCheck], *, cache: HelpCache | None = None) -> Preflight:
    """Check every node (in parallel) and return all problems at once, in node order, with the
    snapshot of each reachable node. Changes nothing on any node."""
    cache = cache or HelpCache()
    if not nodes:
        return Preflight([], {})
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        results = list(pool.map(lambda n: _check_node(n, cache), nodes))
    problems = [p for found, _ in results for p in found]
    snapshots = {n.name: snap for n, (_, snap) in zip(nodes, results, strict=True) if snap}
    return Preflight(problems, snapshots)
