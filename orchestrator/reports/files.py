"""Writing a report file: owner-only, and never half-written."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

# What XML 1.0 cannot carry, and what no text format should: C0 controls but tab and newlines,
# DEL, C1 controls, lone surrogates (invalid UTF-8 decoded with surrogateescape) and the two
# non-characters. Each becomes U+FFFD, so a reader sees that something was there.
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    """``text`` with every character no report format can carry replaced by U+FFFD."""
    return _UNSAFE.sub("\ufffd", text)


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it, replaced in one step
    (a reader never sees half a report); owner-only, like the store it is made from (a
    report holds what the servers answered). An ``OSError`` leaves nothing behind."""
    if path.parent.exists() and not path.parent.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
                       encoding="utf-8", errors="replace") as file:
            file.write(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
