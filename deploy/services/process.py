"""Plain processes as services: each in its own session, with a pid file and a log file.

Every action is one constant ``sh -c`` script sent through the transport, every value a
positional parameter, so the same code drives this machine and a node over SSH in one round
trip per action. No value is ever read as an option: ``env --`` before the variables (a name was
checked by ``ServiceConfig``; GNU ``env`` would run a ``-S...`` word as a command line), ``--``
before every path.

The workdir is checked first (``deploy/workdir.py``: bisect's own, or refused), and the pid and
log files must be regular files of bisect's user, never links. A pid file holds the leader's
pid, its start time and a random token that the service gets in its environment
(``BISECT_SERVICE_TOKEN``): a process group is signalled only when its leader still has that
start time and token, or (the leader gone) a live member of the group has the token. A pid file
that names anything else (a reused pid, a planted file) is removed and nothing is signalled.
The pid and log files are owner-only; the service itself keeps the node's umask.
"""

from __future__ import annotations

import secrets

from deploy.safe_words import SERVICE_TOKEN_ENV, file_name_error, program_error
from deploy.services.base import ServiceConfig, Started
from deploy.transports.base import CommandResult, Transport, TransportError
from deploy.workdir import ABSENT_RC, UNSAFE_RC, WORKDIR_SH, UnsafeWorkdir

_STOP_GRACE_S = 10

# Shared by every action: $1 workdir, $2 pid file. `ours` reads the pid file into p (pid), st
# (start time), tok and succeeds when group p is provably the one bisect started (lead=1: by
# its leader, alive); `live G`: group G has a process that is not a zombie (`kill -0` alone
# counts zombies, which an init that reaps late or never keeps around). Plain `kill -SIG -G`:
# dash's kill rejects `--`.
_PROVE = WORKDIR_SH + r"""
_stat() { _state=""; _start=""; read -r _l 2>/dev/null < "/proc/$1/stat" || return 1
  set -- ${_l##*) }; _state=$1; _start=${20}; }
_nl='
'
_token_in() {
  _q=$1 _n=0
  while :; do  # one read: the environ as it is at one moment
    _e=$(tr '\0' '\n' < "/proc/$_q/environ" 2>/dev/null)
    case "$_nl$_e$_nl" in *"$_nl@TOKEN_ENV@=$tok$_nl"*) return 0 ;; esac
    # inside an exec (setsid's of the program, a launcher's), the environ reads empty for a
    # moment: look again, for at most 2 s (a zombie's or a gone process's stays empty)
    [ -z "$_e" ] && [ $_n -lt 200 ] || return 1
    read -r _l 2>/dev/null < "/proc/$_q/stat" || return 1
    set -- ${_l##*) }; [ "$1" != Z ] || return 1
    _n=$((_n+1)); sleep 0.01
  done
}
live() {
  kill -0 "-$1" 2>/dev/null || return 1; g=$1
  for f in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$f" || continue
    set -- ${l##*) }; [ "$3" = "$g" ] && [ "$1" != Z ] && return 0; done; return 1
}
ours() {
  lead=0; p=""; st=""; tok=""
  [ -f "$2" ] || return 1
  read -r p st tok _ < "$2" || [ -n "$p" ] || return 1
  case $p$st in ''|*[!0-9]*) return 1 ;; esac
  [ -n "$tok" ] && [ "$p" -gt 1 ] || return 1
  if _stat "$p" && [ "$_state" != Z ]; then  # the leader: no scan of /proc needed
    [ "$_start" = "$st" ] && _token_in "$p" && lead=1; [ $lead = 1 ]; return
  fi
  [ -z "$_start" ] || [ "$_start" = "$st" ] || return 1  # a zombie of another process
  live "$p" || return 1
  for f in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$f" || continue  # the leader gone
    set -- ${l##*) }; [ "$3" = "$p" ] && [ "$1" != Z ] || continue
    q=${f#/proc/}; _token_in "${q%/stat}" && return 0; done; return 1
}
checked() { bisect_dir "$1" "$3" && bisect_file "$2"; }
""".replace("@TOKEN_ENV@", SERVICE_TOKEN_ENV)

# start: $1 workdir, $2 pid file, $3 log file, $4 token, then `env -- K=V... PROGRAM ARGS`.
# setsid: the service leads its own process group, so stop() reaches its children too.
_START = _PROVE + r"""
w=$1 pf=$2 lf=$3 tok=$4; shift 4
checked "$w" "$pf" make && bisect_file "$lf" || exit
m=$(umask); umask 077
[ -e "$lf" ] || (set -C; : > "$lf") || exit 1
rm -f -- "$pf"; (set -C; : > "$pf") || exit 1
chmod 600 -- "$lf" "$pf"; offset=$(wc -c < "$lf"); umask "$m"
@TOKEN_ENV@=$tok setsid "$@" >> "$lf" 2>&1 < /dev/null &
p=$!; _stat "$p"; st=$_start n=0
# Until `setsid` is exec'd, /proc/$p/environ is this shell's, without the token, and `ours`
# says no: a health check's first "is it alive?" then read a start as an exit on a loaded
# machine. So wait for the exec, or the process's end (a zombie's environ is empty; the
# commands run here may reap it, hence its start time read first).
while ! _token_in "$p"; do
  _stat "$p" && [ "$_state" != Z ] && [ $n -lt 5000 ] || break; n=$((n+1))
done
printf '%s %s %s\n' "$p" "$st" "$tok" > "$pf"; echo "$offset $p"
""".replace("@TOKEN_ENV@", SERVICE_TOKEN_ENV)

# stop: $1 workdir, $2 pid file. TERM, then KILL after the grace period, only if ours.
_STOP = _PROVE + rf"""
checked "$1" "$2" check; rc=$?; [ $rc -eq {ABSENT_RC} ] && exit 0; [ $rc -eq 0 ] || exit $rc
if ours "$1" "$2"; then
  kill -TERM "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
  i=0; while live "$p" && [ $i -lt {_STOP_GRACE_S * 10} ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "-$p" 2>/dev/null || true
fi
rm -f -- "$2"
"""

# running: $1 workdir, $2 pid file. Prints the pid while the leader bisect started is alive.
_RUNNING = _PROVE + rf"""
checked "$1" "$2" check; rc=$?; [ $rc -eq {ABSENT_RC} ] && exit 0; [ $rc -eq 0 ] || exit $rc
ours "$1" "$2" && [ $lead = 1 ] && echo "$p"; exit 0
"""

# log: $1 workdir, $2 log file, $3 byte offset.
_LOG = _PROVE + rf"""
checked "$1" "$2" check; rc=$?; [ $rc -eq {ABSENT_RC} ] && exit 0; [ $rc -eq 0 ] || exit $rc
[ -f "$2" ] && tail -c "+$3" -- "$2"; exit 0
"""


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

    def _sh(self, script: str, *args: str, timeout_s: float = 60.0) -> CommandResult:
        result = self.transport.run(["sh", "-c", script, "sh", *args], timeout_s=timeout_s)
        if result.returncode == UNSAFE_RC:
            raise UnsafeWorkdir(self.transport.node, result.stderr)
        return result.check()

    def start(self, config: ServiceConfig) -> Started:
        """Start the service (stopping a previous instance first); return its pid and log offset."""
        error = program_error(config.argv[0]) if config.argv else "no command to run"
        if error:
            raise ValueError(f"service {config.name}: {error}")
        self.stop(config.name)
        # `env --`: nothing after it is an option, the first word without '=' is the program.
        env = [f"{key}={value}" for key, value in config.env]
        out = self._sh(_START, self.workdir, self.pid_file(config.name),
                       self.log_file(config.name), secrets.token_hex(16),
                       "env", "--", *env, *config.argv).stdout.split()
        if len(out) != 2:
            raise TransportError(f"{self.transport.node}: could not start {config.name}: {out}")
        return Started(pid=int(out[1]), log_offset=int(out[0]))

    def stop(self, name: str) -> None:
        """Stop the service's whole process group (TERM, then KILL after a grace period), if the
        pid file proves bisect started it; the pid file is removed either way."""
        self._sh(_STOP, self.workdir, self.pid_file(name), timeout_s=_STOP_GRACE_S + 30)

    def stop_leftover(self, name: str) -> None:
        """What the pid file proves bisect started: a process service exists only while a
        campaign runs it."""
        self.stop(name)

    def leave_as_found(self, name: str, was_running: bool) -> None:
        """Stopped: bisect started it (``was_running`` is False, since ``stop_leftover`` came
        first)."""
        self.stop(name)

    def pid(self, name: str) -> int | None:
        """The pid of the group bisect started, while it runs; None otherwise."""
        out = self._sh(_RUNNING, self.workdir, self.pid_file(name)).stdout.strip()
        return int(out) if out.isdigit() else None

    def is_running(self, name: str) -> bool:
        return self.pid(name) is not None

    def read_log(self, name: str, offset: int = 0) -> str:
        return self._sh(_LOG, self.workdir, self.log_file(name), str(int(offset) + 1)).stdout
