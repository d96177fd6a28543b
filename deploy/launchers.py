"""Which running process is the variant's server, when the start command is a launcher.

A start command may be the server itself (``python -m sglang.launch_server ARGS``) or a launcher
that ends in it: a wrapper script whose body ends ``exec python -m sglang.launch_server "$@"``,
``bash -c 'source venv/bin/activate && exec python -m sglang.launch_server "$@"' NAME ARGS``, or a
program that runs a command given as its arguments (``conda run -n ENV python -m … ARGS``,
``env``, ``nice``, ``numactl``), which may spawn the server as a child instead of exec'ing it.
After an exec the started process shows the server's command line, not the launcher's; after a
spawn the server is a descendant of it.

What a variant changes are its levels' flags, appended after the start command (deploy.render):
a process carries the variant when those flags reach it, and they must come last, so that no
argument after them overrides one. Pure: plain byte strings in, values and sentences out.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

Argv = Sequence[bytes]

SHELLS = frozenset({b"sh", b"bash", b"dash", b"ksh", b"zsh", b"mksh", b"ash"})
_SHELL_C = re.compile(rb"-[a-zA-Z]*c[a-zA-Z]*")  # -c, -ec, -lc: a shell's option cluster with c
_NUMBER = re.compile(rb"-?\d+(\.\d*)?([eE][-+]?\d+)?")  # -1 is a value, not a flag


@dataclass(frozen=True)
class Carried:
    """How a process's command line carries the variant's. ``how``: ``command`` (it is the
    command), ``path`` (its program found on the PATH), ``shebang`` (a script run by its
    interpreter), ``launcher`` (a launcher passed the arguments on, by exec or to a child);
    ``launcher``: the start command's words the launcher took for itself."""

    how: str
    launcher: tuple[str, ...] = ()


def _base(word: bytes) -> bytes:
    return os.path.basename(word)


def _shell_args_at(expected: Argv) -> int | None:
    """Where the arguments a shell's ``-c SCRIPT NAME ARGS`` passes on (as "$@") begin."""
    if _base(expected[0]) not in SHELLS:
        return None
    for index, word in enumerate(expected[1:], 1):
        if not word.startswith(b"-") or word == b"--":
            return None  # a script file, not -c
        if _SHELL_C.fullmatch(word):
            return index + 3  # past the option, the script and its $0
    return None


def carried(actual: Argv, expected: Argv, own: int) -> Carried | None:
    """How ``actual`` (a running process's argv) carries ``expected`` (the variant's argv), or
    None. ``expected[:own]`` is the start command; ``expected[own:]`` its levels' flags."""
    actual, expected = list(actual), list(expected)
    if not expected or not actual:
        return None
    if actual == expected:
        return Carried("command")
    # A bare command name is found on the PATH: a manager may exec it by its full path
    # (systemd's ExecStart needs one), and that is the same command.
    if (b"/" not in expected[0] and actual[1:] == expected[1:]
            and _base(actual[0]) == expected[0]):
        return Carried("path")
    # A script with a shebang: the kernel runs [interpreter, (arg,) script path, args...].
    k = len(expected)
    if (len(actual) > k and actual[len(actual) - k + 1:] == expected[1:]
            and _base(actual[-k]) == _base(expected[0])):
        return Carried("shebang")
    # A program that runs the command its arguments name (conda run, env, nice): the process
    # is that command, its program perhaps found on the PATH.
    for at in range(1, min(own, len(expected))):
        if actual[1:] == expected[at + 1:] and _base(actual[0]) == _base(expected[at]):
            return _launcher(expected, at)
    # A wrapper that execs the server with its own arguments ("$@"), or a shell's -c script
    # that does with the arguments after its $0: the process's command line ends with them.
    for begin in (1, _shell_args_at(expected)):
        if (begin is not None and begin <= own and len(expected) > begin
                and len(actual) > len(expected) - begin
                and actual[len(actual) - (len(expected) - begin):] == expected[begin:]):
            return _launcher(expected, begin)
    # A shell's -c script that ends by exec'ing plain words: `source venv/bin/activate && exec
    # python -m sglang.launch_server --tp 8 "$@"`, its "$@" the words after its $0.
    args_at = _shell_args_at(expected)
    script = expected[args_at - 2] if args_at is not None and args_at - 2 < own else None
    words = _exec_words(script) if script is not None else None
    if args_at is not None and words is not None and (own == len(expected) or args_at <= own):
        passed = list(expected[args_at:])
        server = [w for word in words for w in (passed if word == b'"$@"' else [word])]
        if (server and actual[1:] == server[1:] and _base(actual[0]) == _base(server[0])
                and (own == len(expected) or b'"$@"' in words)):
            return _launcher(expected, min(args_at, len(expected)))
    return None


def _exec_words(script: bytes) -> list[bytes] | None:
    """The words a -c script ends by exec'ing (``"$@"`` kept as one word), when they are plain:
    no other expansion, no operator after the exec."""
    try:
        text = script.decode()
    except UnicodeDecodeError:
        return None
    found = re.search(r"(?:^|[;&|\n]\s*)exec\s+(?P<tail>[^;&|<>`()\n]*)$", text)
    if found is None or "$" in found["tail"].replace('"$@"', ""):
        return None
    try:
        words = shlex.split(found["tail"].replace('"$@"', "\0"))
    except ValueError:
        return None
    return [b'"$@"' if w == "\0" else w.encode() for w in words]


def _launcher(expected: Argv, at: int) -> Carried:
    return Carried("launcher", tuple(w.decode(errors="replace") for w in expected[:at]))


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    depth: int  # 0: the started process itself
    argv: tuple[bytes, ...] | None  # None: gone, or its command line unreadable


def descendants(table: str, root: int, limit: int) -> list[tuple[int, int, int]]:
    """(pid, ppid, depth) of ``root``'s descendants, nearest first, at most ``limit``, from
    lines ``PID PPID`` (a node's /proc at one moment)."""
    children: dict[int, list[int]] = {}
    for line in table.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            children.setdefault(int(words[1]), []).append(int(words[0]))
    found: list[tuple[int, int, int]] = []
    level, depth, seen = [root], 0, {root}
    while level and len(found) < limit:
        depth += 1
        nxt = [c for p in level for c in sorted(children.get(p, [])) if c not in seen]
        seen.update(nxt)
        parents = {c: p for p in level for c in children.get(p, [])}
        found += [(c, parents[c], depth) for c in nxt]
        level = nxt
    return found[:limit]


def server(processes: Sequence[Process], expected: Argv, own: int
           ) -> tuple[Process, Carried] | None:
    """The process that runs the variant: the deepest of ``processes`` (the started one first,
    then its descendants nearest first) that carries it, so that a launcher which spawned the
    server is passed over for the server; a fork that copies its parent's command line is the
    parent's own (SGLang's workers), not what a launcher started."""
    argv_of = {p.pid: p.argv for p in processes}
    best: tuple[Process, Carried] | None = None
    for process in processes:
        if process.argv is None or (process.depth and argv_of.get(process.ppid) == process.argv):
            continue
        how = carried(process.argv, expected, own)
        if how is not None and (best is None or process.depth > best[0].depth):
            best = (process, how)
    return best


def resembling(processes: Sequence[Process], expected: Argv) -> Process | None:
    """The process most like the variant's server, to say what it lacks: the most of the
    variant's words in its command line, the deepest on a tie (a launcher's child is the
    server it started), a fork's copy of its parent's command line passed over."""
    words = set(expected[1:])
    argv_of = {p.pid: p.argv for p in processes}
    seen = [p for p in processes
            if p.argv is not None and not (p.depth and argv_of.get(p.ppid) == p.argv)]
    return max(seen, key=lambda p: (sum(w in words for w in p.argv or ()), p.depth),
               default=None)


def _groups(words: Argv) -> list[list[bytes]]:
    """A flag with the values that follow it: ``--tp 8`` → [[--tp, 8]]."""
    groups: list[list[bytes]] = []
    for word in words:
        if not groups or (word.startswith(b"-") and not _NUMBER.fullmatch(word)):
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


def _show(word: bytes | str, limit: int = 80) -> str:
    text = word.decode(errors="replace") if isinstance(word, bytes) else word
    return text if len(text) <= limit else text[: limit - 1] + "…"


def flag_problems(actual: Argv, flags: Argv) -> list[str]:
    """Each of the variant's ``flags`` that ``actual`` lacks, or has with another value (its
    last occurrence: the one a parser keeps)."""
    problems: list[str] = []
    for group in _groups(flags):
        flag, values = group[0], group[1:]
        name, eq, inline = flag.partition(b"=") if flag.startswith(b"--") else (flag, b"", b"")
        want = [inline] if eq else values
        if not name.startswith(b"-"):  # a bare word: present or not
            if flag not in actual:
                problems.append(f"missing {_show(b' '.join(group))!r}")
            continue
        at = [i for i, w in enumerate(actual) if w == name or w.startswith(name + b"=")]
        if not at:
            problems.append(f"missing {_show(b' '.join(group))!r}")
            continue
        word = actual[at[-1]]
        got = [word.partition(b"=")[2]] if b"=" in word else list(actual[at[-1] + 1:][:len(want)])
        if got != want:
            problems.append(f"{_show(name)!r} is {_show(b' '.join(got))!r} in the process, "
                            f"the variant passes {_show(b' '.join(want))!r}")
    return problems


def shell_hint(expected: Argv, own: int) -> str:
    """Why a shell's ``-c`` launcher lost the variant's flags, when it is one that did."""
    at = _shell_args_at(expected)
    if at is None or own >= len(expected):
        return ""
    script = expected[at - 2]
    if at > own:
        return (f" (`{_show(_base(expected[0]))} -c SCRIPT` takes the word after SCRIPT as its "
                f"$0: {_show(expected[at - 1])!r} is lost; put a name for $0 after the script)")
    if b"$@" not in script:
        return " (the -c script does not pass its arguments on: end it with `exec … \"$@\"`)"
    return ""
