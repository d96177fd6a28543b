"""Unit files on a node, as an operator installs them before bisect ever runs: for the systemd
lab's hosts (``bisect lab up --systemd``) and the tests of the systemd service manager."""

from __future__ import annotations

import re

from deploy.services.systemd import unit_quote
from deploy.transports.base import Transport

_INSTALL = """set -e
f=/etc/systemd/system/$1
t=$(mktemp "$f.XXXXXX"); trap 'rm -f "$t"' EXIT
printf '%s' "$2" > "$t"; chmod 644 "$t"; mv -f "$t" "$f"
systemctl daemon-reload
"""


def install_unit(transport: Transport, unit: str, text: str) -> None:
    """Write ``/etc/systemd/system/UNIT`` on a node (atomically) and reload systemd: what the
    operator does before bisect ever runs."""
    if not re.fullmatch(r"[A-Za-z0-9:_.@-]+\.service", unit) or unit.startswith("-"):
        raise ValueError(f"{unit!r} is not a service unit name")
    transport.run(["sh", "-c", _INSTALL, "sh", unit, text]).check()


def service_unit(argv: list[str], *, description: str,
                 env: dict[str, str] | None = None) -> str:
    """A plain Type=simple unit running ``argv`` (absolute argv[0]); stdout to the journal,
    unbuffered, as SGLang's own units do."""
    command = " ".join(unit_quote(a, expand_dollar=True) for a in argv)
    lines = ["[Unit]", f"Description={description.replace('%', '%%')}", "",
             "[Service]", "Type=simple", f"ExecStart={command}",
             f"Environment={unit_quote('PYTHONUNBUFFERED=1', expand_dollar=False)}"]
    lines += [f"Environment={unit_quote(f'{k}={v}', expand_dollar=False)}"
              for k, v in (env or {}).items()]
    return "\n".join(lines) + "\n"
