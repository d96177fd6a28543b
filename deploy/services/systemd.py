"""systemd units as services: a variant is a drop-in on the operator's own unit.

The node already runs the service as a unit (``sglang-prefill.service``, installed by the
operator). ``start`` writes the variant as a runtime drop-in,
``/run/systemd/system/UNIT.d/zz-bisect.conf`` (``ExecStart=`` reset and replaced, and an
``EnvironmentFile=`` naming ``zz-bisect.env`` beside it, root's alone), reloads systemd and
restarts the unit; ``remove_dropin`` deletes both again: they are the only things bisect writes
on the node. Under /run they are in memory, never on the node's disk, and gone if the node
reboots (the unit comes back as the operator installed it). The environment is in a file, not
in ``Environment=`` lines, because systemd shows those to any user (``systemctl show -p
Environment``) and a variant's values may be secrets; an ``EnvironmentFile=`` read after the
operator's own also wins over theirs.

Every action is one ``sh -c`` script through the transport with every value passed as a
positional parameter (``"$1"``), never spliced into the script: the transport quotes the argv for
the remote shell, and systemd sees values quoted by its own rules (``unit_quote``).

``Started.log_offset`` is opaque: ``(node epoch µs at this start) << 32 | bytes already read``.
``read_log`` returns this start's journal text from that byte on, so a caller that adds the byte
length of what it read (as it does with a plain log file's offset) moves past it exactly.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping

from deploy.errors import SetupError
from deploy.safe_words import SYSTEMD_UNIT, env_name_error
from deploy.services.base import ServiceConfig, Started
from deploy.transports.base import Transport, TransportError

UNIT_DIR = "/run/systemd/system"  # runtime units: in memory, gone at a reboot
LEGACY_DIR = "/etc/systemd/system"  # where bisect wrote drop-ins before
DROPIN = "zz-bisect.conf"  # sorts after `systemctl edit`'s override.conf: the variant wins
ENV_FILE = "zz-bisect.env"  # beside it; not *.conf, so systemd reads it only as named
_SHIFT = 32  # low bits of log_offset: bytes of this start's journal text already read
NOT_INSTALLED_RC, SETUP_RC, EXITED_RC = 90, 91, 92  # _START's own exit statuses
_ESCAPES = {"\\": "\\\\", '"': '\\"', "%": "%%", "\n": "\\n", "\t": "\\t"}


class VariantNotApplied(RuntimeError):
    """The unit runs, but not with the variant's environment (UnsetEnvironment=, or a drop-in
    sorting after bisect's with an EnvironmentFile= of its own, overrides it): nothing measured
    would be valid. A failure of the variant on this unit, not of the way to the node: retrying
    cannot help (so never a TransportError)."""


class StartFailed(RuntimeError):
    """``systemctl start`` failed after the variant's command ran (a ``Type=notify`` server that
    exits before it is ready): the service's own failure with this variant, like one that
    never becomes healthy; never retried as the way to the node."""


def _why(journal: str) -> str:
    """The line of a failed start's output that says why: systemd's own words first."""
    lines = [line.strip() for line in journal.splitlines() if line.strip()]
    for needle in ("Failed to locate executable", "could not be executed", "Failed at step",
                   "status=", "Job for"):
        found = [line for line in lines if needle in line]
        if found:
            return found[0].rstrip(".")
    return lines[-1].rstrip(".") if lines else "no journal lines"


def unit_quote(word: str, *, expand_dollar: bool) -> str:
    """``word`` as one double-quoted systemd word that unquotes to exactly ``word``.

    Unit files C-unescape (``\\``, ``"``, ``\\n``...), expand specifiers (``%h``: ``%%`` is a
    literal ``%``) and, in ``ExecStart=`` only, expand ``$VAR``/``${VAR}`` (``$$`` is a literal
    ``$``). ``Environment=`` does not expand ``$``, so it must not be doubled there."""
    out = []
    for ch in word:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch == "$" and expand_dollar:
            out.append("$$")
        elif ch == "\0":
            raise ValueError(f"a NUL byte cannot reach a process: {word!r}")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_dropin(config: ServiceConfig, env_file: str) -> str:
    """The drop-in for one variant: its environment file (when it has an environment), and its
    command line (when it has one)."""
    lines = ["# Written by bisect: the variant under test. Delete this file and run",
             "# `systemctl daemon-reload` to restore the unit as the operator installed it.",
             "[Service]"]
    if config.env:
        # A path, taken whole and never unquoted (quotes would be part of it); only its
        # specifiers are expanded. Ours: /run/systemd/system/UNIT.d/zz-bisect.env.
        lines.append(f"EnvironmentFile={env_file.replace('%', '%%')}")
    if config.argv:
        if not config.argv[0].startswith("/"):
            # Leading -@:+! would be read as ExecStart prefixes, and a bare name would be looked
            # up in systemd's own fixed PATH: the manager resolves it first (see start).
            raise ValueError(f"{config.name}: ExecStart needs an absolute path, "
                             f"not {config.argv[0]!r}")
        lines.append("ExecStart=")  # reset: a Type=simple unit takes exactly one command line
        lines.append("ExecStart=" + " ".join(unit_quote(a, expand_dollar=True)
                                             for a in config.argv))
    return "\n".join(lines) + "\n"


def render_env_file(config: ServiceConfig) -> str:
    """``KEY=VALUE`` lines systemd reads back exactly: each value shell-quoted (systemd's
    environment files take single-quoted text literally, newlines included, and join adjacent
    quoted pieces as a shell does; nothing in single quotes is expanded)."""
    lines = []
    for key, value in config.env:
        error = env_name_error(key)  # ServiceConfig checked it too: the one rule, said again here
        if error:
            raise ValueError(f"{config.name}: {error}")
        if any(ord(ch) < 32 and ch not in "\t\n" for ch in value) or "\x7f" in value:
            raise ValueError(f"{config.name}: the value of {key} has control characters, "
                             f"which systemd refuses in an environment")
        lines.append(f"{key}={shlex.quote(value)}")
    return "".join(line + "\n" for line in lines)


# $1 unit  $2 drop-in dir  $3 drop-in text  $4 environment file text.
# Prints "<epoch ns at start> <MainPID>". Exits NOT_INSTALLED_RC (no unit file), SETUP_RC (the
# unit could not start before the variant's command ran, or systemd could not execute it:
# status 200-243 are systemd's own, 203/EXEC a missing executable) or EXITED_RC (`systemctl
# start` failed after the command ran: the service's own failure), the journal on stderr.
_START = f"""set -e
u=$1 d=$2 f=$2/{DROPIN} e=$2/{ENV_FILE}
[ -n "$(systemctl show -p FragmentPath --value -- "$u")" ] || {{
  echo "$u is not installed there (LoadState=$(systemctl show -p LoadState --value -- "$u"))" >&2
  exit {NOT_INSTALLED_RC}; }}
umask 077  # root's alone: the environment may hold secrets
mkdir -p "$d"
t=$(mktemp "$d/.bisect.XXXXXX") v=$(mktemp "$d/.bisect.XXXXXX")  # not *.conf: ignored
trap 'rm -f "$t" "$v"' EXIT
printf '%s' "$4" > "$v"; mv -f "$v" "$e"  # read at each start: no reload needed for it
printf '%s' "$3" > "$t"
if ! cmp -s "$t" "$f" || [ "$(systemctl show -p NeedDaemonReload --value -- "$u")" = yes ]
then mv -f "$t" "$f"; systemctl daemon-reload; fi
systemctl stop -- "$u"
systemctl reset-failed -- "$u" 2>/dev/null || true  # bisect's restarts never hit a start limit
journalctl --sync 2>/dev/null || true  # the old instance's last lines are stamped before $s
main() {{ systemctl show -p "$1" --value -- "$u"; }}
m=$(main ExecMainStartTimestampMonotonic)
s=$(date +%s%N)
# 203/EXEC said from the unit, naming what systemd was asked to run: the executor's own journal
# line ("Failed to locate executable ...") can come after the sync on a loaded node.
noexec() {{  # $1 ExecStartPre or ExecStart: its first command that ended 203/EXEC this start
  b=$(systemctl show -p "$1" --value -- "$u" |
      sed -n 's/^{{ path=\\([^;]*\\) ;.* code=exited ; status=203 }}$/\\1/p' | head -n 1)
  [ -z "$b" ] || echo "$u: $1's $b could not be executed (status=203/EXEC)" >&2; }}
why() {{  # the journal of this start, and whether the variant's command ran (it is the main one)
  journalctl --sync 2>/dev/null || true  # systemd's own lines of the failed start, written
  journalctl -q --no-pager -o cat -n 30 -u "$u" --since "@$((s / 1000000000))" >&2 || true
  if [ "$(main ExecMainStartTimestampMonotonic)" = "$m" ]  # never ran: a command before it
  then noexec ExecStartPre; exit {SETUP_RC}; fi
  c=$(main ExecMainCode) x=$(main ExecMainStatus)
  [ "$c" != 1 ] || [ "${{x:-0}}" != 203 ] || noexec ExecStart
  if [ "$c" = 1 ] && [ "${{x:-0}}" -ge 200 ] && [ "$x" -le 243 ]; then exit {SETUP_RC}; fi
  exit "$1"; }}
systemctl start -- "$u" || why {EXITED_RC}
# Type=simple returns after fork: wait for the exec, else /proc shows systemd's own argv and env;
# and a child that died before it (no exe link: gone or a zombie, e.g. CHDIR) until systemd
# clears MainPID, so that its status is read below, not a dead pid taken for the service.
p=$(systemctl show -p MainPID --value -- "$u"); init=$(readlink /proc/1/exe); i=0
while [ "$p" -gt 0 ] && {{ pe=$(readlink "/proc/$p/exe" || true); [ "$pe" = "$init" ] ||
      [ -z "$pe" ]; }} && [ $i -lt 200 ]
do sleep 0.05; i=$((i+1)); p=$(systemctl show -p MainPID --value -- "$u"); done
[ "$p" -gt 0 ] || (why 0) || [ $? -ne {SETUP_RC} ] || exit {SETUP_RC}  # exited at once: why?
echo "$s $p"
"""

# $1 unit  $2 drop-in dir  $3 "restart" or ""
_REMOVE = f"""set -e
u=$1 d=$2 f=$2/{DROPIN} old={LEGACY_DIR}/$1.d
# Earlier versions of bisect wrote the drop-in under /etc: one a killed driver left goes too.
[ -e "$f" ] || [ -e "$old/{DROPIN}" ] || {{ rm -f -- "$2/{ENV_FILE}"; exit 0; }}
rm -f -- "$f" "$2/{ENV_FILE}" "$old/{DROPIN}"
rmdir -- "$d" 2>/dev/null || true  # only if empty: the operator's own drop-ins stay
rmdir -- "$old" 2>/dev/null || true
systemctl daemon-reload
[ "$3" != restart ] || systemctl try-restart -- "$u"
"""

# $1 pid. Both files base64 on one line each: values may hold any byte, newlines included.
_PROC = 'base64 -w0 "/proc/$1/cmdline"; echo; base64 -w0 "/proc/$1/environ"; echo'


class SystemdServiceManager:
    """Services as existing systemd units, driven over a transport (as root, or with sudo).

    A service ``name`` is the unit ``{unit_prefix}{name}.service`` unless ``units`` maps it."""

    def __init__(self, transport: Transport, *, unit_prefix: str = "",
                 units: Mapping[str, str] | None = None, sudo: bool = False,
                 start_timeout_s: float = 600.0, verify_env: bool = True) -> None:
        self.transport = transport
        self.unit_prefix = unit_prefix
        self.units = dict(units or {})
        self.sudo = sudo  # `sudo -n`: a login that may run root commands without a password
        self.start_timeout_s = start_timeout_s  # Type=notify units block `start` until ready
        self.verify_env = verify_env

    def unit(self, name: str) -> str:
        unit = self.units.get(name) or f"{self.unit_prefix}{name}"
        unit = unit if unit.endswith(".service") else f"{unit}.service"
        if not SYSTEMD_UNIT.fullmatch(unit):
            raise ValueError(f"{unit!r} is not a systemd service name")  # nor a path to write
        return unit

    def dropin_path(self, name: str) -> str:
        return f"{UNIT_DIR}/{self.unit(name)}.d/{DROPIN}"

    def _sh(self, script: str, *args: str, timeout_s: float = 60.0) -> str:
        argv = ["sh", "-c", script, "sh", *args]
        argv = ["sudo", "-n", *argv] if self.sudo else argv
        return self.transport.run(argv, timeout_s=timeout_s).check().stdout

    def _resolve(self, config: ServiceConfig) -> ServiceConfig:
        """A bare argv[0] (``python``) becomes the path the node's shell finds, PATH from the
        variant's env if it sets one: what a plain-process start would have run."""
        if not config.argv or config.argv[0].startswith("/"):
            return config
        path = dict(config.env).get("PATH")
        script = ('[ -z "$2" ] || PATH=$2; p=$(command -v -- "$1") || exit 1; '
                  'case $p in /*) echo "$p";; *) exit 1;; esac')
        found = self.transport.run(["sh", "-c", script, "sh", config.argv[0], path or ""])
        if not found.ok:  # a retry cannot help: the node's setup
            node = self.transport.node
            raise SetupError(f"{node}: {config.name}: {config.argv[0]!r} is not a command on "
                             "this node; give an absolute path", node, self.unit(config.name))
        return ServiceConfig(config.name, (found.stdout.strip(), *config.argv[1:]), config.env)

    def start(self, config: ServiceConfig) -> Started:
        """Apply the variant as the unit's drop-in and (re)start the unit. ``pid`` is MainPID,
        0 if the service exited at once (its journal says why: ``read_log``)."""
        config = self._resolve(config)
        unit = self.unit(config.name)
        directory = f"{UNIT_DIR}/{unit}.d"
        argv = ["sh", "-c", _START, "sh", unit, directory,
                render_dropin(config, f"{directory}/{ENV_FILE}"), render_env_file(config)]
        argv = ["sudo", "-n", *argv] if self.sudo else argv
        result = self.transport.run(argv, timeout_s=self.start_timeout_s + 120)
        node = self.transport.node
        if result.returncode == NOT_INSTALLED_RC:
            raise SetupError(f"{node}: {unit} is not installed there (systemd: "
                             "LoadState=not-found): install it on the node, or name the "
                             "installed unit in the service's `unit:`", node, unit)
        if result.returncode == SETUP_RC:
            raise SetupError(f"{node}: {unit} cannot start whatever the variant "
                             f"({_why(result.stderr)}): fix the unit on the node (`systemctl "
                             f"status {unit}` there says more)\n{result.stderr.strip()}",
                             node, unit)
        if result.returncode == EXITED_RC:
            raise StartFailed(f"{node}: {config.name}: `systemctl start {unit}` failed: "
                              f"{_why(result.stderr)}\n{result.stderr.strip()}")
        out = result.check().stdout.split()
        if len(out) != 2 or not all(word.isdigit() for word in out):
            raise TransportError(f"{self.transport.node}: could not start {unit}: {out}")
        started = Started(pid=int(out[1]), log_offset=(int(out[0]) // 1000) << _SHIFT)
        if self.verify_env and started.pid > 0 and config.env:
            self._check_env(config, unit, started.pid)
        return started

    def _check_env(self, config: ServiceConfig, unit: str, pid: int) -> None:
        try:
            _, env = self.process(pid)
        except TransportError:
            return  # it exited meanwhile: the health wait reports that, with the journal
        if not env:
            return  # a zombie's (it exited meanwhile) reads empty: not a variant's environment
        wrong = [key for key, value in config.env if env.get(key) != value]
        if wrong:
            raise VariantNotApplied(
                f"{self.transport.node}: {unit} runs without the variant's value of "
                f"{', '.join(wrong)}: UnsetEnvironment= or a drop-in sorting after "
                f"{DROPIN} overrides it")

    def process(self, pid: int) -> tuple[list[str], dict[str, str]]:
        """argv and environment of a process on the node, byte-exact (the proof of a variant)."""
        lines = self._sh(_PROC, str(int(pid))).split("\n")
        cmdline, environ = (base64.b64decode(line) for line in lines[:2])
        argv = [a.decode(errors="surrogateescape") for a in cmdline.split(b"\0")[:-1]]
        env = {}
        for item in environ.split(b"\0"):
            key, sep, value = item.decode(errors="surrogateescape").partition("=")
            if sep:
                env[key] = value
        return argv, env

    def show(self, name: str) -> dict[str, str]:
        """``ActiveState``, ``SubState`` and ``MainPID`` of the service's unit."""
        out = self._sh('systemctl show -p ActiveState,SubState,MainPID -- "$1"', self.unit(name))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self, name: str) -> int:
        return int(self.show(name).get("MainPID", "0") or 0)

    def is_running(self, name: str) -> bool:
        state = self.show(name)
        # "activating" counts (Type=notify before READY=1); "auto-restart" has MainPID 0.
        return (state.get("ActiveState") in ("active", "activating", "reloading")
                and int(state.get("MainPID", "0") or 0) > 0)

    def stop(self, name: str) -> None:
        """Stop the unit (its whole cgroup, as the unit's KillMode says). The drop-in stays."""
        self._sh('systemctl stop -- "$1" || [ "$(systemctl show -p LoadState --value -- "$1")" '
                 '= not-found ]', self.unit(name), timeout_s=self.start_timeout_s + 60)  # none

    def read_log(self, name: str, offset: int = 0) -> str:
        """This start's journal lines (the unit's processes and systemd's lines about it), from
        byte ``offset & 0xffffffff`` of that text on. ``offset`` 0: the whole journal."""
        since_us, skip = offset >> _SHIFT, offset & ((1 << _SHIFT) - 1)
        since = f"@{since_us // 1_000_000}.{since_us % 1_000_000:06d}" if since_us else ""
        script = 'journalctl -q --no-pager -o cat -u "$1" ${2:+--since "$2"}'
        text = self._sh(script, self.unit(name), since)
        return text.encode()[skip:].decode(errors="replace")

    def remove_dropin(self, name: str, *, restart: bool = False) -> None:
        """Delete bisect's drop-in and reload: the unit is again exactly the operator's.
        ``restart``: if it is running, restart it so that it runs the operator's config too."""
        unit = self.unit(name)
        self._sh(_REMOVE, unit, f"{UNIT_DIR}/{unit}.d", "restart" if restart else "",
                 timeout_s=self.start_timeout_s + 120)

    def start_unchanged(self, name: str) -> None:
        """Start the unit as the operator configured it (after ``remove_dropin``)."""
        self._sh('systemctl start -- "$1"', self.unit(name), timeout_s=self.start_timeout_s)

    def stop_leftover(self, name: str) -> None:
        """Nothing: the unit is the operator's and may have run before the campaign; a drop-in
        an earlier run left goes in ``leave_as_found``, at the end."""

    def leave_as_found(self, name: str, was_running: bool) -> None:
        """Stopped, bisect's drop-in removed, and started again exactly as the operator
        configured it if it was running before."""
        self.stop(name)
        self.remove_dropin(name)
        if was_running:
            self.start_unchanged(name)

    def describe(self, name: str) -> str:
        """``systemctl cat``: the unit as systemd loaded it, drop-ins included."""
        return self._sh('systemctl cat -- "$1"', self.unit(name))
