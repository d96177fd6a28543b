"""Pre/post hooks: commands a level runs on a node before the restart (pre) or after the services
are healthy (post), e.g. drop a cache directory, warm a model, record ``nvidia-smi``.

A hook is an argv, never a shell string: ``["sh", "-c", "..."]`` is there for who needs a shell.
It runs under ``timeout`` on the node itself, so a hook that hangs is killed there and not merely
abandoned by the transport. ``timeout -- LIMIT ARGV``: no word of the hook is ever an option of
``timeout``'s, so the argv reaches the node exactly as written.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from deploy.changes.base import ChangeError, run_sh, tail
from deploy.safe_words import check_argv, check_environment, env_name_error
from deploy.transports.base import Transport

# "$1" the directory ("" for the login directory), "$2" the timeout, "$3" how many NAME=VALUE
# words follow, then the argv. `export "$1"` assigns the word verbatim: no expansion of the value.
_RUN = r"""
dir=$1; limit=$2; n=$3; shift 3
if [ -n "$dir" ]; then cd -- "$dir" || exit 125; fi
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n-1)); done
exec timeout -k 5 -- "$limit" "$@"
"""


@dataclass(frozen=True)
class Hook:
    argv: tuple[str, ...]
    timeout_s: float = 300.0
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))
        if not self.argv:
            raise ValueError("a hook needs a command")
        bad = [name for name in self.env if env_name_error(name)]
        if bad:
            raise ValueError(f"hook {self.name}: invalid environment variable names {bad}")
        check_environment(self.env.items(), f"hook {self.name}")
        check_argv((*self.argv, self.cwd or ""), f"hook {self.name}")

    @property
    def name(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class HookResult:
    hook: str
    returncode: int
    seconds: float
    stdout_tail: str
    stderr_tail: str


def run_hook(transport: Transport, hook: Hook, phase: str = "hook") -> HookResult:
    """Run one hook; a non-zero exit or a timeout is a ChangeError naming the hook and showing
    the tail of its stderr (or of stdout when stderr is empty)."""
    words = [f"{key}={value}" for key, value in hook.env.items()]
    began = time.monotonic()
    result = run_sh(transport, _RUN,
                    [hook.cwd or "", f"{hook.timeout_s:g}", str(len(words)), *words, *hook.argv],
                    timeout_s=hook.timeout_s + 30)
    seconds = round(time.monotonic() - began, 3)
    if not result.ok:
        if result.returncode == 124:
            why = f"timed out after {hook.timeout_s:g}s"
        elif result.returncode == 125 and hook.cwd:
            why = f"cannot enter {hook.cwd}"
        elif result.returncode == 127:
            why = "command not found"
        else:
            why = f"exited {result.returncode}"
        output = tail(result.stderr or result.stdout, 1500)
        raise ChangeError(transport.node, f"{phase} hook `{hook.name}` {why}: {output}".rstrip())
    return HookResult(hook.name, result.returncode, seconds, tail(result.stdout, 1000),
                      tail(result.stderr, 1000))


def run_hooks(transport: Transport, hooks: Iterable[Hook], phase: str) -> list[HookResult]:
    """Run hooks in order; the first failure stops the rest (the trial fails with its error)."""
    return [run_hook(transport, hook, phase) for hook in hooks]
