"""Who listens on the port a server was started on: the server bisect started, or another.

A health URL that answers proves only that something answers there. When another process
already holds the port (a second campaign's server, an operator's instance started by hand, a
child of an old server that kept the listening socket), the server bisect started cannot bind
it and exits, or shares it (SO_REUSEPORT), while /health says 200 for the other one: the trials
would measure a process that is not the variant. Seen: two campaigns given one port, where
fp8 trials leaked as only bf16 + HiCache does.

So after a restart the proof asks the node, in one round trip, which sockets listen on the
port the command line names (``--port N``, as SGLang, vLLM and the twin take it), in the
server's own network namespace, and which processes hold them. Every one must be held by the
started process or its descendants. Otherwise no retry can help while the other process runs:
a setup error, naming the port and the process that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deploy.errors import SetupError
from deploy.launchers import descendants
from deploy.proof import SECTIONS_SH, TREE_SH, argv_of, new_boundary, parse_sections
from deploy.transports.base import Transport, TransportError

_TREE_LIMIT = 4096  # every descendant: a server's workers may hold its listening socket too
_SHOW = 120

# $3 is the port as /proc/net/tcp writes it (4 upper-case hex digits). A server that died
# at start has no /proc/PID/net: the shell's own namespace is read then.
_SCRIPT = SECTIONS_SH + TREE_SH + r"""
B=$1; p=$2; port=$3
_listening() {
  { cat "/proc/$p/net/tcp" "/proc/$p/net/tcp6" 2>/dev/null ||
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; } |
    awk -v port="$port" '$4 == "0A" { n = split($2, a, ":"); if (a[n] == port) print $10 }'
}
L=$(_listening | sort -u)
_s listening echo $L
H=
if [ -n "$L" ]; then
  H=$(ls -l /proc/[0-9]*/fd/ 2>/dev/null | awk -v want=" $(echo $L) " '
    /^\/proc\/[0-9]+\/fd\/?:$/ { split($0, a, "/"); pid = a[3]; next }
    $NF ~ /^socket:\[[0-9]+\]$/ {
      i = substr($NF, 9, length($NF) - 9); if (index(want, " " i " ")) print pid, i }' | sort -u)
fi
_s holders echo "$H"
_s tree _tree
for h in $(echo "$H" | awk '{ print $1 }' | sort -u); do
  _s "argv$h" od -An -v -tx1 "/proc/$h/cmdline"
done
"""


def port_of(argv: Sequence[str]) -> int | None:
    """The port a server's command line names (``--port N`` or ``--port=N``; the last one, as
    argparse takes it), or None."""
    port: str | None = None
    for index, word in enumerate(argv):
        if word == "--port" and index + 1 < len(argv):
            port = argv[index + 1]
        elif word.startswith("--port="):
            port = word.removeprefix("--port=")
    return int(port) if port is not None and port.isdigit() and 0 < int(port) < 65536 else None


def program(argv: Sequence[bytes]) -> str:
    """A holder's command line up to its first long option: what it is, without the values of
    its options (another server's ``--api-key`` is no business of this campaign's store)."""
    words: list[str] = []
    for word in argv:
        if word.startswith(b"--") and words:
            break
        words.append(word.decode(errors="replace"))
    return " ".join(words)[:_SHOW] or "an empty command line"


@dataclass(frozen=True)
class Listeners:
    """What the node said: the listening sockets' inodes, which processes hold each, the
    started process and its descendants, and the holders' command lines."""

    port: int
    inodes: frozenset[int]
    holders: dict[int, frozenset[int]]  # inode -> pids holding it
    ours: frozenset[int]  # the started process and its descendants
    argvs: dict[int, str]

    def others(self) -> list[str]:
        """A phrase for each listener the started server does not hold: who holds it."""
        found: list[str] = []
        for inode in sorted(self.inodes):
            pids = self.holders.get(inode, frozenset())
            if pids & self.ours:
                continue
            found += [f"process {p} ({self.argvs.get(p, 'its command line unreadable')})"
                      for p in sorted(pids)] or ["a process this user cannot see"]
        return found

    def checks(self) -> dict[str, object]:
        held = sorted(p for pids in self.holders.values() for p in pids)
        return {"port": self.port, "listening": len(self.inodes), "held_by": held}


def parse(stdout: str, boundary: str, port: int, pid: int) -> Listeners:
    sec = parse_sections(stdout, boundary)
    if "tree" not in sec:  # the script did not run through
        raise TransportError(f"the listener script failed: {stdout.strip()[-300:]}")
    inodes = frozenset(int(w) for w in sec["listening"].text.split() if w.isdigit())
    holders: dict[int, set[int]] = {}
    for line in sec["holders"].text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            holders.setdefault(int(words[1]), set()).add(int(words[0]))
    ours = frozenset([pid, *(p for p, _, _ in descendants(sec["tree"].text, pid, _TREE_LIMIT))])
    argvs = {int(name[4:]): program(argv) for name, section in sec.items()
             if name.startswith("argv") and (argv := argv_of(section)) is not None}
    return Listeners(port, inodes, {i: frozenset(p) for i, p in holders.items()}, ours,
                     argvs)


def listeners(transport: Transport, pid: int, port: int, *, timeout_s: float = 30.0
              ) -> Listeners:
    boundary = new_boundary()
    result = transport.run(["sh", "-c", _SCRIPT, "sh", boundary, str(int(pid)),
                            format(port, "04X")], timeout_s=timeout_s)
    return parse(result.stdout, boundary, port, pid)


def check_port(transport: Transport, pid: int, argv: Sequence[str], service: str, *,
               timeout_s: float = 30.0) -> dict[str, object]:
    """What was seen of the port ``argv`` names (nothing when it names none); SetupError where
    a process the deploy did not start listens on it."""
    port = port_of(argv)
    if port is None:
        return {"port": None}
    seen = listeners(transport, pid, port, timeout_s=timeout_s)
    if others := seen.others():
        raise SetupError(
            f"{transport.node}: {service}: port {port}, which its command line names, is held "
            f"by {'; '.join(others)}, not by the server this deploy started (process {pid}): "
            f"requests would reach that one. Stop it, or give the service a port nothing else "
            f"listens on", node=transport.node)
    return seen.checks()
