"""The user's own probe, as ``git bisect run`` runs one: a program run after each deploy whose exit
status judges the variant (the ``workload: {command: ...}`` form of a campaign file).

Exit 0 is good; 1-127 bad, except 125: the variant cannot be judged (``git bisect skip``); a
probe killed by a signal (128+), one past its ``timeout_s`` or one that cannot be started is an
error of the trial, never a judgement of the variant. One run is one session: ``ok`` or
``probe_failed``. The probe runs on the driver's machine with an argv (never a shell), in the
campaign file's directory, with the variant in its environment (``probe_env``); the last
``MAX_OUTPUT`` bytes of its stdout and stderr are kept as the run's evidence.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from experiments.outcomes import Outcome

MAX_OUTPUT = 64 * 1024  # bytes of a run's output kept: its tail, where a failure says why
DRAIN_S = 2.0  # after the probe exits, for what it left writing to the same pipe
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a probe past its timeout
SKIP = 125  # git bisect run: "this commit cannot be tested"
DAY_S = 86_400.0
# A probe's keys; any other key of a `workload:` with `command` is the stress workload's.
PROBE_KEYS = ("command", "runs", "timeout_s", "cwd", "seed")


def _words(value: Any) -> Any:
    """A string is split as a shell would split it (it never reaches a shell); a list is taken
    word for word."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:  # an unbalanced quote
            raise PydanticCustomError("probe_command", "cannot split {text} as a shell would: "
                                      "{reason}", {"text": repr(value), "reason": str(exc)}
                                      ) from None
    if not isinstance(value, list):
        raise PydanticCustomError(
            "probe_command", "a program and its arguments: a string (split as a shell would) "
                             "or a list of strings")
    return value


class ProbeSpec(BaseModel):
    """The user's own probe, run after each deploy instead of the stress workload."""

    model_config = ConfigDict(extra="forbid")

    command: Annotated[list[str], BeforeValidator(_words)] = Field(
        description="The program and its arguments (a string is split as a shell would split "
                    "it; it never reaches a shell). A program with a '/' is relative to the "
                    "campaign file's directory; one without is looked up on PATH.")
    runs: int = Field(default=1, ge=1, le=10_000,
                      description="Runs per trial, each one session (ok or probe_failed).")
    timeout_s: float = Field(default=1800.0, gt=0, le=DAY_S, allow_inf_nan=False,
                             description="A run past this is killed: an error of the trial.")
    cwd: str | None = Field(
        default=None, description="Where it runs, relative to the campaign file's directory "
                                  "(default: that directory); made absolute when loaded.")
    seed: int = Field(default=0, ge=-(2**63), lt=2**63,
                      description="Seeds BISECT_SEED (the trial's seed, given to the probe). "
                                  "Absent, each campaign draws its own; set, it is replayed.")

    @field_validator("command")
    @classmethod
    def _some(cls, command: list[str]) -> list[str]:
        if not command:
            raise PydanticCustomError("probe_command", "the probe needs a program to run "
                                                       "(e.g. `command: ./repro.sh`)")
        return command

    @property
    def sessions(self) -> int:
        """Sessions a trial plans: one a run (the name the driver and strategies use)."""
        return self.runs


def placed(spec: ProbeSpec, base: Path) -> tuple[ProbeSpec, list[tuple[tuple[str | int, ...],
                                                                      str]]]:
    """The probe as stored: ``cwd`` absolute (``base``: the campaign file's directory), and what
    is wrong with it where the file is loaded (a program that is not there or cannot run)."""
    cwd = (base / spec.cwd if spec.cwd else base).resolve()
    placed_spec = spec.model_copy(update={"cwd": str(cwd)})
    if not cwd.is_dir():
        return placed_spec, [(("workload", "cwd"), f"{str(cwd)!r} is not a directory")]
    problem = program_problem(spec.command[0], cwd)
    return placed_spec, [] if problem is None else [(("workload", "command", 0), problem)]


def program_problem(program: str, cwd: Path) -> str | None:
    """Why ``program`` cannot be started from ``cwd``, or None."""
    if "/" not in program:
        if shutil.which(program) is not None:
            return None
        here = " (a file of that name is in the campaign's directory: write ./" + program + ")" \
            if (cwd / program).exists() else ""
        return f"{program!r} is not on PATH{here}"
    path = cwd / program
    if not path.exists():
        return f"{program!r} does not exist (relative to {str(cwd)!r})"
    if path.is_dir() or not os.access(path, os.X_OK):
        return f"{program!r} is not an executable file (chmod +x it, or name its interpreter " \
               f"first: `command: [sh, {program}]`)"
    return None


def env_name(factor: str) -> str:
    """``BISECT_LEVEL_<FACTOR>``: the factor's name upper-cased, '-' and '.' as '_'."""
    return "BISECT_LEVEL_" + "".join(c if c.isalnum() else "_" for c in factor.upper())


def probe_env(base: Mapping[str, str], *, variant: str, levels: Mapping[str, str],
              endpoint: str, pool: str, trial_id: int, seed: int, run: int, runs: int,
              ) -> dict[str, str]:
    """What the probe is told of the trial, over the driver's environment. Every value is one
    of the environment's, never a word of a command."""
    env = {k: v for k, v in base.items() if not k.startswith("BISECT_LEVEL_")}
    env.update({"BISECT_VARIANT": variant, "BISECT_ENDPOINT": endpoint, "BISECT_POOL": pool,
                "BISECT_TRIAL_ID": str(trial_id), "BISECT_SEED": str(seed),
                "BISECT_RUN": str(run), "BISECT_RUNS": str(runs)})
    env.update({env_name(factor): level for factor, level in levels.items()})
    return env


Judgement = Literal["good", "bad", "skip", "error"]


@dataclass(frozen=True)
class ProbeRun:
    """One run of the probe: how it ended and the tail of what it wrote."""

    run: int  # from 1
    exit_code: int | None  # None: it never started
    duration_s: float
    output: str  # stdout and stderr as they interleaved: the last MAX_OUTPUT bytes
    cut: int = 0  # bytes of output left out before the tail
    timed_out: bool = False
    error: str | None = None  # why it could not be started

    @property
    def judgement(self) -> Judgement:
        code = self.exit_code
        if self.timed_out or code is None or code < 0 or code >= 128:
            return "error"  # a signal, a timeout, a program that never ran: the tool's
        if code == SKIP:
            return "skip"
        return "good" if code == 0 else "bad"

    @property
    def outcome(self) -> Outcome:
        return Outcome.OK if self.judgement == "good" else Outcome.PROBE_FAILED

    def status(self) -> str:
        """How it ended, in words: ``exit 1 after 0.42 s``."""
        if self.error is not None:
            return f"could not start: {self.error}"
        code = self.exit_code
        if self.timed_out:
            ended = "ran past its timeout and was killed"
        elif code is not None and code < 0:
            ended = f"killed by {_signal_name(-code)}"
        else:
            ended = f"exit {code}"
        return f"{ended} after {self.duration_s:.2f} s"

    def evidence(self) -> str:
        """The status line, then the output's tail (what a session stores as its evidence)."""
        cut = f"[... {self.cut} bytes before this cut]\n" if self.cut else ""
        return f"{self.status()}\n{cut}{self.output}"

    def details(self) -> dict[str, Any]:
        return {"run": self.run, "exit_code": self.exit_code, "duration_s": self.duration_s,
                "judgement": self.judgement, "status": self.status()}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Tail:
    """The last ``limit`` bytes of a stream, and how many came before them."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.cut = limit, bytearray(), 0

    def pump(self, stream: Any) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed under it: what came is kept
            while chunk := stream.read1(65536):
                self.data += chunk
                if len(self.data) > self.limit:
                    extra = len(self.data) - self.limit
                    del self.data[:extra]
                    self.cut += extra


def run_probe(argv: list[str], *, cwd: str, env: Mapping[str, str], timeout_s: float,
              run: int = 1, limit: int = MAX_OUTPUT) -> ProbeRun:
    """Run the probe once and wait for it (blocking). It runs in a session of its own so that a
    timeout ends everything it started; whatever of its group still holds its output after it
    exited (a server it forgot) is killed too. Never raises for what the probe does."""
    began = time.monotonic()
    try:
        process = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    except OSError as exc:  # not found, not executable, a bad interpreter line
        return ProbeRun(run, None, time.monotonic() - began, "", error=f"{argv[0]}: "
                        f"{exc.strerror or exc}")
    tail = _Tail(limit)
    reader = threading.Thread(target=tail.pump, args=(process.stdout,), name="probe-output",
                              daemon=True)
    reader.start()
    timed_out = False
    try:
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process.pid, signal.SIGTERM)
            try:
                code = process.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid, signal.SIGKILL)
                code = process.wait()
        ended = time.monotonic()
        reader.join(DRAIN_S)
        if reader.is_alive():  # a child of the probe still holds the pipe: its group lives on
            _kill_group(process.pid, signal.SIGKILL)
            reader.join(DRAIN_S)  # one that left the group keeps it: its output is not waited for
    except BaseException:  # interrupted: the probe does not outlive the trial
        _kill_group(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        if process.stdout is not None and not reader.is_alive():
            process.stdout.close()  # (closing under a blocked read would wait for it)
    data, cut = bytes(tail.data), tail.cut
    output = data.decode("utf-8", errors="replace")
    return ProbeRun(run, code, ended - began, output, cut, timed_out)


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
