"""Lab hosts that run systemd as PID 1, like the real nodes, so that the systemd service manager
is tested against the real thing.

Each host is a container in the host's network namespace (so it is on the lab bridge like a
plain host): new pid, mount, uts, ipc and cgroup namespaces; an overlay root whose lower layer is
this machine's ``/`` (the project and its venv are there) and whose upper layer is a tmpfs (every
write inside, journal included, vanishes with the container); fresh ``/proc``, read-only ``/sys``,
its own cgroup2 tree, tmpfs ``/dev``, ``/run`` and ``/tmp``. systemd boots a target with only
sysinit and the lab's sshd (the real root's enabled services, PostgreSQL and the like, stay off).

Never boot systemd on the real root: its tmpfiles would wipe /tmp. Here the only real directories
the container sees writable are the host's workdir; the lab directory (keys, configs) is bound
read-only, so nothing inside can remove it (tmpfiles stops at mount points anyway).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

from deploy.lab import net
from deploy.lab.model import Lab, LabError, LabHost
from deploy.lab.sshd import SSHD, is_ours, start_time, terminate
from deploy.services.systemd import unit_quote

SYSTEMD = "/lib/systemd/systemd"
TARGET = "bisect-lab.target"
SSHD_UNIT = "bisect-lab-sshd.service"
CGROUP_PREFIX = "bisect-lab-"

# Runs as PID 1 of the new namespaces, then becomes systemd. $1 state dir (a tmpfs goes there,
# in this mount namespace only), $2 lab directory, $3 host workdir, $4 unit files to install,
# $5 hostname, $6 machine id, then directories to show live. Every mount below is private to
# the container.
_BOOT = r"""set -eu
S=$1 L=$2 W=$3 U=$4 N=$5 M=$6; shift 6
mount -t tmpfs -o mode=0755 bisect-upper "$S"
mkdir -p "$S/upper/etc/systemd/system" "$S/work" "$S/root"
cp "$U"/* "$S/upper/etc/systemd/system/"
echo "$N" > "$S/upper/etc/hostname"
echo "$M" > "$S/upper/etc/machine-id"  # its own journal directory and identity
mount -t overlay -o "lowerdir=/,upperdir=$S/upper,workdir=$S/work" bisect-root "$S/root"
R=$S/root
mount -t proc proc "$R/proc"
mount -t sysfs -o ro sysfs "$R/sys"  # ro: systemd then skips udev and anything that pokes it
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755,nosuid dev "$R/dev"
for d in null zero full random urandom tty; do
  touch "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"; ln -s /proc/self/fd "$R/dev/fd"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$R/dev/shm"
mount -t tmpfs -o mode=0755,nosuid,nodev run "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$R/tmp"
for d in "$@"; do mkdir -p "$R$d"; mount --bind "$d" "$R$d"; done
mkdir -p "$R$L"; mount --bind "$L" "$R$L"; mount -o remount,bind,ro "$R$L"
mount --bind "$W" "$R$W"  # services' pid and log files (the process manager) stay writable
echo "$N" > /proc/sys/kernel/hostname
cd "$R"; mkdir .oldroot; pivot_root . .oldroot; umount -l /.oldroot; rmdir /.oldroot
exec env -i container=bisect-lab /lib/systemd/systemd --unit=bisect-lab.target --show-status=no
"""

# Moves itself into the container's cgroup (the root of its cgroup namespace), then becomes
# `unshare`; detached, so the container outlives whoever built the lab. Prints unshare's pid.
_LAUNCH = ('cg=$1 log=$2; shift 2; (echo 0 > "$cg/cgroup.procs" && exec "$@") '
           '> "$log" 2>&1 < /dev/null & echo $!')


def require() -> None:
    if not os.access(SYSTEMD, os.X_OK):
        raise LabError(f"{SYSTEMD} is missing: a systemd lab needs systemd installed")
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            raise LabError(f"`{tool}` is missing: install util-linux")
    cgroup2_root()


def cgroup2_root() -> str:
    """Where this machine mounts the cgroup2 hierarchy (``/sys/fs/cgroup`` or, on a hybrid
    setup like this one, ``/sys/fs/cgroup/unified``)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return left.split()[4]
    raise LabError("no cgroup2 hierarchy is mounted: a systemd lab host needs one")


def cgroup_of(host: LabHost) -> str:
    return f"{cgroup2_root()}/{CGROUP_PREFIX}{host.namespace}"


def _unit_files(lab: Lab, host: LabHost) -> str:
    units = Path(host.directory, "units")
    units.mkdir(exist_ok=True)
    sshd = " ".join(unit_quote(a, expand_dollar=True)
                    for a in (SSHD, "-D", "-e", "-f", host.sshd_config))
    (units / SSHD_UNIT).write_text(
        "[Unit]\nDescription=sshd of the bisect lab host\n\n[Service]\n"
        f"ExecStart={sshd}\n"
        "# Like Debian's ssh.service: a restart of sshd leaves the sessions' processes alone.\n"
        "KillMode=process\nRestart=always\nRestartSec=100ms\n"
        "RuntimeDirectory=sshd\nRuntimeDirectoryPreserve=yes\n", encoding="utf-8")
    (units / TARGET).write_text(
        "[Unit]\nDescription=bisect lab host: sshd and nothing else\n"
        f"Requires=sysinit.target {SSHD_UNIT}\nAfter=sysinit.target {SSHD_UNIT}\n",
        encoding="utf-8")
    # sshd runs inside the container, where the lab directory is read-only: no pid file (systemd
    # tracks the daemon), log to the journal (-e).
    config = Path(host.sshd_config)
    lines = config.read_text(encoding="utf-8").splitlines()
    lines = ["PidFile none" if line.startswith("PidFile ") else line for line in lines]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(units)


def live_directories(lab: Lab) -> list[str]:
    """Directories the container sees as they are, not through the overlay: the project (and its
    venv) and the login user's home. Files the host changes under an overlay's lower layer while
    it is mounted may show stale (a lock file pyenv's rehash removed on the host stayed "held"
    in the container, so every SSH login hung for a minute); plain lab hosts share them too."""
    wanted = [str(Path(__file__).resolve().parents[2]), sys.prefix,
              os.path.expanduser(f"~{lab.user}")]
    chosen: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted}, key=len):
        if path != "/" and os.path.isdir(path) and not any(
                path.startswith(f"{c}/") for c in chosen):
            chosen.append(path)
    return chosen


def boot_log(host: LabHost) -> str:
    return f"{host.directory}/boot.log"


def launch(lab: Lab, host: LabHost) -> LabHost:
    """Start the host's container (after net.create_host); returns the host with its init's pid.
    It boots in the background: ``wait_booted`` waits for it."""
    units = _unit_files(lab, host)
    state = Path(host.directory, "root")
    state.mkdir(exist_ok=True)
    cgroup = cgroup_of(host)
    os.makedirs(cgroup, exist_ok=True)
    container = ["nsenter", f"--net=/run/netns/{host.namespace}",
                 "unshare", "--pid", "--fork", "--mount", "--uts", "--ipc", "--cgroup",
                 "--propagation", "private",
                 "sh", "-c", _BOOT, "boot", str(state), lab.directory, host.workdir, units,
                 host.name, uuid.uuid4().hex, *live_directories(lab)]
    done = subprocess.run(["sh", "-c", _LAUNCH, "launch", cgroup, boot_log(host), *container],
                          capture_output=True, text=True, check=False, timeout=30,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise LabError(f"container of {host.name} did not start: {done.stderr.strip()}")
    outer = int(done.stdout)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        children = _children(outer)
        if children:  # unshare's only child: PID 1 of the container, as this machine sees it
            return replace(host, init_pid=children[0], init_start=start_time(children[0]))
        if start_time(outer) is None:
            break
        time.sleep(0.01)
    raise LabError(f"container of {host.name} did not start: {_boot_log(host)}")


def nsenter(host: LabHost, *argv: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside the host's container, directly (no SSH): for building and checks."""
    return subprocess.run(["nsenter", "-t", str(host.init_pid), "-a", *argv],
                          capture_output=True, text=True, check=False, timeout=timeout_s,
                          stdin=subprocess.DEVNULL)


def wait_booted(lab: Lab, timeout_s: float = 60.0) -> Lab:
    """Wait until every host's systemd has finished booting and its sshd runs; record sshd."""
    for host in lab.hosts:
        deadline = time.monotonic() + timeout_s
        state = ""
        while state not in ("running", "degraded"):
            if not is_ours(host.init_pid, host.init_start):
                raise LabError(f"systemd of {host.name} exited while booting: {_boot_log(host)}")
            if time.monotonic() > deadline:
                journal = nsenter(host, "journalctl", "-b", "-q", "--no-pager", "-n", "30")
                raise LabError(f"systemd of {host.name} did not finish booting within "
                               f"{timeout_s:g}s (state {state or 'unknown'}): "
                               f"{journal.stdout.strip()[-1500:] or _boot_log(host)}")
            time.sleep(0.05)
            state = nsenter(host, "systemctl", "is-system-running").stdout.strip()
        lab = lab.with_host(await_sshd(host, deadline))
    return lab


def await_sshd(host: LabHost, deadline: float, *, not_pid: int | None = None) -> LabHost:
    """The host with the pid of the sshd listener systemd runs (a new one, if ``not_pid``)."""
    while time.monotonic() < deadline:
        for pid in _children(host.init_pid or 0):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if exe == SSHD and pid != not_pid:
                return replace(host, sshd_pid=pid, sshd_start=start_time(pid))
        time.sleep(0.02)
    state = nsenter(host, "systemctl", "status", "--no-pager", SSHD_UNIT)
    raise LabError(f"sshd of {host.name} is not running: {state.stdout.strip()[-1000:]}")


def restart_sshd(host: LabHost, timeout_s: float = 10.0) -> LabHost:
    """Kill the host's sshd and its sessions; systemd starts a new listener (Restart=always)."""
    terminate(pid for pid in net.namespace_pids(host.namespace) if _exe(pid) == SSHD)
    return await_sshd(host, time.monotonic() + timeout_s, not_pid=host.sshd_pid)


def kill(hosts: tuple[LabHost, ...], prefix: str) -> None:
    """End the lab's containers, and everything in them, at once; remove their cgroups.

    SIGKILL to a container's PID 1 makes the kernel kill its whole pid namespace; its mount
    namespace, with every mount the container made, goes with its last process. The cgroups
    also catch containers of a lab whose lab.json is lost (found by name)."""
    cgroups = _cgroups(prefix)
    for cgroup in cgroups:
        # Kernels before 5.14 have no cgroup.kill: the SIGKILL below still ends each container.
        with contextlib.suppress(OSError):
            Path(cgroup, "cgroup.kill").write_text("1")
    inits = [h.init_pid for h in hosts if h.init_pid and is_ours(h.init_pid, h.init_start)]
    for pid in inits:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    for cgroup in cgroups:
        # Deepest first: a cgroup goes only once empty of processes and children.
        for path in sorted(Path(cgroup).glob("**/"), key=lambda p: -len(p.parts)):
            while True:  # dying tasks hold a cgroup for a moment after SIGKILL
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        raise LabError(f"cannot remove cgroup {path}: {exc.strerror}") from None
                    time.sleep(0.02)
    while any(start_time(pid) is not None for pid in inits):
        if time.monotonic() > deadline:
            raise LabError(f"container init processes {inits} survived SIGKILL")
        time.sleep(0.02)


def _cgroups(prefix: str) -> list[str]:
    try:
        root = cgroup2_root()
    except LabError:
        return []
    pattern = re.compile(rf"{re.escape(CGROUP_PREFIX + prefix)}-\d+")
    return [str(p) for p in Path(root).iterdir() if p.is_dir() and pattern.fullmatch(p.name)]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return sorted(found)


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def _boot_log(host: LabHost) -> str:
    try:
        return Path(boot_log(host)).read_text(errors="replace").strip()[-1000:] or "(empty log)"
    except OSError:
        return "(no log)"
