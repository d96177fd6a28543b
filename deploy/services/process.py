"""Plain processes as services: each in its own session, with a pid file and a log file.

Every action is one ``sh -c`` script sent through the transport, with every value quoted, so the
same code drives this machine and a node over SSH in one round trip per action. No value is ever
read as an option: ``env --`` before the variables (a name was checked by ``ServiceConfig``; GNU
``env`` would run a ``-S...`` word as a command line), ``--`` before every path. The pid and log
files (and a workdir bisect creates) are owner-only; the service itself keeps the node's umask.
"""

from __future__ import annotations

import shlex

from deploy.safe_words import file_name_error, program_error
from deploy.services.base import ServiceConfig, Started
from deploy.transports.base import Transport, TransportError

_STOP_GRACE_S = 10

# `live G`: group G has a process that is not a zombie. `kill -0` alone counts zombies, which an
# init that reaps late or never (containers) keeps around, so a dead group would look alive.
# Plain `kill -SIG -G`: dash's kill rejects `--`.
_LIVE = (
    'live() { kill -0 "-$1" 2>/dev/null || return 1; [ -r /proc/self/stat ] || return 0; g=$1; '
    'for f in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$f" || continue; '
    'set -- ${l##*) }; [ "$3" = "$g" ] && [ "$1" != Z ] && return 0; done; return 1; }; '
)


class ProcessServiceManager:
    def __init__(self, transport: Transport, workdir: str) -> None:
        self.transport = transport
        self.workdir = workdir.rstrip("/") or "/"

    def _file(self, name: str, suffix: str) -> str:
        error = file_name_error(name)  # any other name is safe: every path is quoted
        if error:
            raise ValueError(f"service name {error}")
        return f"{self.workdir}/{name}{suffix}"

    def pid_file(self, name: str) -> str:
        return self._file(name, ".pid")

    def log_file(self, name: str) -> str:
        return self._file(name, ".log")

    def _sh(self, script: str, timeout_s: float = 60.0) -> str:
        return self.transport.run(["sh", "-c", script], timeout_s=timeout_s).check().stdout

    def start(self, config: ServiceConfig) -> Started:
        """Start the service (stopping a previous instance first); return its pid and log offset."""
        error = program_error(config.argv[0]) if config.argv else "no command to run"
        if error:
            raise ValueError(f"service {config.name}: {error}")
        q = shlex.quote
        log, pid = q(self.log_file(config.name)), q(self.pid_file(config.name))
        self.stop(config.name)
        env = " ".join(q(f"{key}={value}") for key, value in config.env)
        command = " ".join(q(arg) for arg in config.argv)
        # setsid: the service leads its own process group, so stop() reaches its children too.
        # `env --`: nothing after it is an option, the first word without '=' is the program.
        script = (
            f"set -e; m=$(umask); umask 077; mkdir -p -- {q(self.workdir)}; touch -- {log} {pid}; "
            f"chmod 600 -- {log} {pid}; offset=$(wc -c < {log}); umask \"$m\"; "
            f"setsid env -- {env} {command} >> {log} 2>&1 < /dev/null & "
            f'echo $! > {pid}; echo "$offset $!"'
        )
        out = self._sh(script).split()
        if len(out) != 2:
            raise TransportError(f"{self.transport.node}: could not start {config.name}: {out}")
        return Started(pid=int(out[1]), log_offset=int(out[0]))

    def stop(self, name: str) -> None:
        """Stop the service's whole process group: TERM, then KILL after a grace period."""
        pid = shlex.quote(self.pid_file(name))
        script = (
            f"{_LIVE}[ -f {pid} ] || exit 0; p=$(cat -- {pid}); "
            f'if [ "$p" -gt 1 ] 2>/dev/null && live "$p"; then '
            f'kill -TERM "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; '
            f'i=0; while live "$p" && [ $i -lt {_STOP_GRACE_S * 10} ]; '
            f"do sleep 0.1; i=$((i+1)); done; "
            f'kill -KILL "-$p" 2>/dev/null || true; fi; rm -f -- {pid}'
        )
        self._sh(script, timeout_s=_STOP_GRACE_S + 30)

    def stop_leftover(self, name: str) -> None:
        """Whatever runs from the pid file is bisect's: a process service exists only while a
        campaign runs it."""
        self.stop(name)

    def leave_as_found(self, name: str, was_running: bool) -> None:
        """Stopped: bisect started it (``was_running`` is False, since ``stop_leftover`` came
        first)."""
        self.stop(name)

    def pid(self, name: str) -> int | None:
        out = self._sh(f"cat -- {shlex.quote(self.pid_file(name))} 2>/dev/null || true").strip()
        return int(out) if out.isdigit() else None

    def is_running(self, name: str) -> bool:
        pid = self.pid(name)
        if pid is None:
            return False
        script = (
            f'p={pid}; kill -0 "$p" 2>/dev/null || exit 1; [ -r /proc/self/stat ] || exit 0; '
            f'read -r l 2>/dev/null < "/proc/$p/stat" || exit 1; set -- ${{l##*) }}; [ "$1" != Z ]'
        )
        return self.transport.run(["sh", "-c", script]).ok

    def read_log(self, name: str, offset: int = 0) -> str:
        log = shlex.quote(self.log_file(name))
        return self._sh(f"[ -f {log} ] && tail -c +{int(offset) + 1} -- {log} || true")
