"""What a string from a campaign may be where bisect builds a command line or an environment.

One rule per kind of word, in one place: the service managers, the preflight and the variants
refuse a bad word before anything runs on a node, and campaign validation applies the same
rules so that ``bisect validate`` names the file, line and field. Each ``*_error`` returns a
sentence (the reason) or None. This module imports nothing of bisect: campaign validation
(experiments/) uses it without depending on the rest of deploy/.

Why each rule: GNU ``env`` reads a leading ``-S``/``--split-string`` argument as a command line
to split and run, so a variable name such as ``-Ssh -c '...' x`` was a command; ``env`` reads
any word with ``=`` before the program as an assignment; no process can receive a NUL byte (the
kernel's strings end there) and a lone surrogate cannot be encoded to bytes at all; git reads a
ref that begins with ``-`` as an option (``--upload-pack=...``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# POSIX (Base Definitions, 8.1) portable names: what every shell can `export` and systemd accepts.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNSENDABLE = re.compile("[\0\ud800-\udfff]")
_SHELL_CHARS = set("'`\"$\\;&<>|(){}\x7f")  # OpenSSH's valid_hostname() refuses these
# A systemd service unit name: also a path bisect writes under /etc/systemd/system, and never
# an option of systemctl's (no leading '-').
SYSTEMD_UNIT = re.compile(r"[A-Za-z0-9:_.\\@][A-Za-z0-9:_.\\@-]{0,247}\.service")


# Set by bisect in a process service's environment: how it tells the process group it started
# (deploy/services/process.py). A campaign's value would hide it, and the service be unstoppable.
SERVICE_TOKEN_ENV = "BISECT_SERVICE_TOKEN"


def env_name_error(name: str) -> str | None:
    if name == SERVICE_TOKEN_ENV:
        return f"{name} is bisect's own (the token that tells the process it started)"
    if ENV_NAME.fullmatch(name):
        return None
    return (f"{name!r} is not an environment variable name (letters, digits and underscores, "
            f"not starting with a digit)")


def file_name_error(name: str) -> str | None:
    """A name that becomes one file name (a service's WORKDIR/NAME.pid): never a path."""
    if not name or name in (".", "..") or "/" in name:
        return f"{_short(name)} is not a file name (empty, '.', '..' or with a '/')"
    return word_error(name)


def word_error(word: str) -> str | None:
    """An argument or a value that cannot reach a process exactly as written."""
    found = _UNSENDABLE.search(word)
    if found is None:
        return None
    if found[0] == "\0":
        return f"{_short(word)} contains a NUL byte, which no process can receive"
    return f"{_short(word)} contains a lone surrogate (\\ud800-\\udfff), which is not text"


def program_error(program: str) -> str | None:
    """The first word of a command that ``env NAME=VALUE ... PROGRAM`` starts."""
    if not program:
        return "the program to run is an empty string"
    if "=" in program:
        return (f"the program {_short(program)} contains '=', which `env` would read as a "
                f"variable assignment (set variables under `env:`)")
    return word_error(program)


def unit_error(unit: str) -> str | None:
    """A unit as a service names it: ``.service`` is added when missing, as the manager does."""
    full = unit if unit.endswith(".service") else f"{unit}.service"
    if SYSTEMD_UNIT.fullmatch(full):
        return None
    return (f"{_short(unit)} is not a systemd service name (letters, digits, ':_.\\@-', "
            f"not starting with '-')")


def host_error(host: str, what: str = "host") -> str | None:
    """An SSH host or user, as OpenSSH 9.6 checks them (CVE-2023-51385): a config's
    ``ProxyCommand ssh -W %h:%p bastion`` puts the host among a command's words, so spaces,
    shell syntax or a leading '-' there would add options or commands to it."""
    if not host:
        return f"the {what} is empty"
    if host.startswith("-"):
        return f"the {what} {_short(host)} begins with '-'"
    bad = sorted({ch for ch in host if ch in _SHELL_CHARS or ch.isspace() or ord(ch) < 32})
    if bad:
        return (f"the {what} {_short(host)} contains {', '.join(map(repr, bad))}: not a host "
                f"or user name (it would reach an ssh config's ProxyCommand)")
    return word_error(host)


def ref_error(ref: str) -> str | None:
    """A git ref or revision: a name, never an option (``--upload-pack=...``, ``-c x=y``)."""
    if not ref:
        return "a git ref cannot be empty"
    if ref.startswith("-"):
        return f"the git ref {_short(ref)} begins with '-': git would read it as an option"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in ref):
        return f"the git ref {_short(ref)} contains whitespace or control characters"
    return word_error(ref)


def check_environment(env: Iterable[tuple[str, str]], what: str) -> None:
    """Raise ValueError naming ``what`` at the first bad variable name or value."""
    for name, value in env:
        error = env_name_error(name) or word_error(name) or word_error(value)
        if error:
            raise ValueError(f"{what}: {error}")


def check_argv(argv: Iterable[str], what: str) -> None:
    for arg in argv:
        error = word_error(arg)
        if error:
            raise ValueError(f"{what}: {error}")


def _short(word: str, limit: int = 80) -> str:
    shown = repr(word)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
