"""systemd calendar expressions (``OnCalendar=``), as systemd itself reads them: checked, listed
slot by slot, and translated to a crontab's five fields where cron can say the same.

Every answer comes from ``systemd-analyze calendar`` (its normalized form, its iterations from a
base time), never from a parser of our own: the slots a schedule counts as missed are then the
slots its timer would have fired at. Times are UTC-aware datetimes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime

ANALYZE = "systemd-analyze"
BATCH = 500  # iterations asked of systemd-analyze at a time
MAX_SLOTS = 10_000  # the most slots one question lists (a 5 s calendar after a week off)
_CONTROL = re.compile(r"[\x00-\x1f\x7f%]")
_WHEN = re.compile(r"^\s*(?:Next elapse|Iter\. #\d+|\(in UTC\)):\s*(.+?)\s*$")
_STAMP = re.compile(r"\w{3} (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC$")


class CalendarError(ValueError):
    """A calendar expression systemd refuses, or that cron cannot say (the message names
    ``--on-calendar``)."""


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    program = shutil.which(ANALYZE)
    if program is None:
        raise CalendarError(f"--on-calendar: `{ANALYZE}` is not installed: it checks calendar "
                            "expressions as systemd reads them (install systemd)")
    # C locale: the weekday and month words systemd prints are its own English ones either way;
    # TZ is left as the caller has it: systemd's timers read local time like this process.
    env = {**os.environ, "LC_ALL": "C"}
    return subprocess.run([program, "calendar", *args], capture_output=True, text=True,
                          check=False, timeout=30, stdin=subprocess.DEVNULL, env=env)


def _checked(expression: str) -> str:
    if not expression.strip():
        raise CalendarError("--on-calendar: the calendar expression is empty")
    if _CONTROL.search(expression):
        raise CalendarError(f"--on-calendar: {expression!r} contains '%' or control "
                            "characters, which no calendar expression has")
    return expression


@dataclass(frozen=True)
class Calendar:
    expression: str  # as the user wrote it (what OnCalendar= gets)
    normalized: str  # as systemd spells it: `Mon..Fri *-*-* 09:00:00`
    next_elapse: datetime


def check(expression: str) -> Calendar:
    """The expression as systemd reads it; CalendarError if systemd refuses it or it never
    elapses again (a date in the past)."""
    done = _analyze("--", _checked(expression))
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1:] or ["refused"]
        raise CalendarError(f"--on-calendar: {expression!r} is not a systemd calendar "
                            f"expression ({reason[0]}); see `man systemd.time`, e.g. "
                            "'*-*-* 03:00', 'Mon..Fri 09:00', 'hourly'")
    normalized = next((line.split(":", 1)[1].strip() for line in done.stdout.splitlines()
                       if line.strip().startswith("Normalized form:")), "")
    elapses = _elapses(done.stdout)
    if not normalized or not elapses:
        raise CalendarError(f"--on-calendar: {expression!r} never elapses again (a time in "
                            "the past?): its timer would never fire")
    return Calendar(expression, normalized, elapses[0])


def _elapses(text: str) -> list[datetime]:
    """The elapses systemd-analyze printed, in UTC: where the local zone is not UTC, each local
    line is followed by its `(in UTC)` twin, which replaces it."""
    found: list[datetime | None] = []
    for line in text.splitlines():
        matched = _WHEN.match(line)
        if matched is None:
            continue
        stamp = _STAMP.match(matched[1])
        when = None if stamp is None else datetime.strptime(
            stamp[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        if line.strip().startswith("(in UTC)") and found:
            found[-1] = when
        else:
            found.append(when)  # None: a local time (its UTC twin follows) or "never"
    return [when for when in found if when is not None]


def slots(expression: str, after: datetime, until: datetime) -> list[datetime]:
    """The times the expression elapses strictly after ``after`` and at or before ``until``
    (both aware), as systemd counts them; at most MAX_SLOTS (the latest ones)."""
    _checked(expression)
    found: list[datetime] = []
    base = after
    while True:
        # systemd's next elapse is strictly after its base time, to the second
        done = _analyze(f"--iterations={BATCH}", f"--base-time=@{int(base.timestamp())}",
                        "--", expression)
        if done.returncode != 0:
            raise CalendarError(f"--on-calendar: {expression!r}: {done.stderr.strip()}")
        batch = [when for when in _elapses(done.stdout) if when > after]
        found += [when for when in batch if when <= until]
        if not batch or batch[-1] > until:
            return found[-MAX_SLOTS:]
        if len(found) > MAX_SLOTS:
            found = found[-MAX_SLOTS:]
        base = batch[-1]


def missed(expression: str, previous: datetime, now: datetime) -> list[datetime]:
    """The slots since ``previous`` (the last run, or the last slot already recorded) that got
    no run: every slot up to ``now`` except the latest, which is the one this run serves (on
    time, or caught up at boot: ``Persistent=true``)."""
    return slots(expression, previous, now)[:-1]


# --- cron --------------------------------------------------------------------------------

_WEEKDAYS = {"Mon": 1, "Tue": 2, "Wed": 3, "Thu": 4, "Fri": 5, "Sat": 6, "Sun": 0}
_FIELD = re.compile(r"\d+(?:\.\.\d+)?(?:/\d+)?")


def _no_cron(expression: str, why: str) -> CalendarError:
    return CalendarError(f"--on-calendar: {expression!r} has no crontab equivalent: {why}; "
                         "install it as a systemd timer instead (leave out --crontab)")


def _cron_field(value: str, low: int, high: int, expression: str, what: str) -> str:
    """One component of systemd's normalized form (`*`, `5`, `1..5`, `00/15`, lists of them)
    as cron writes it."""
    if value == "*":
        return "*"
    parts = []
    for part in value.split(","):
        if not _FIELD.fullmatch(part):
            raise _no_cron(expression, f"its {what} {value!r} is not a plain value, range or "
                                       "repetition")
        span, _, step = part.partition("/")
        first, _, last = span.partition("..")
        start = int(first)
        end = int(last) if last else (high if step else start)
        if not low <= start <= end <= high:
            raise _no_cron(expression, f"its {what} {value!r} is outside {low}..{high}")
        text = str(start) if start == end else f"{start}-{end}"
        if step:
            text = f"*/{int(step)}" if start == low and end == high else f"{text}/{int(step)}"
        parts.append(text)
    return ",".join(parts)


def _cron_weekdays(value: str, expression: str) -> str:
    days: set[int] = set()
    for part in value.split(","):
        first, _, last = part.partition("..")
        if first not in _WEEKDAYS or (last and last not in _WEEKDAYS):
            raise _no_cron(expression, f"its weekdays {value!r} are not weekday names")
        order = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        a, b = order.index(first), order.index(last or first)
        days.update(_WEEKDAYS[order[i]] for i in range(a, b + 1))  # systemd refuses a wrap
    ordered, runs = sorted(days), list[list[int]]()
    for day in ordered:  # consecutive days as ranges: Mon..Fri is 1-5
        if runs and runs[-1][1] == day - 1:
            runs[-1][1] = day
        else:
            runs.append([day, day])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cron_fields(expression: str) -> str:
    """The five crontab fields (minute hour day month weekday) that fire when the expression
    does; CalendarError (naming why) for what cron cannot say: seconds, years, a time zone, the
    last days of a month (`~`), weekdays together with days of the month (cron fires on
    either, systemd on both)."""
    words = check(expression).normalized.split()
    weekdays = words.pop(0) if words and words[0][:3] in _WEEKDAYS else None
    if len(words) != 2:
        raise _no_cron(expression, "it names a time zone (cron runs in its own)")
    date, time = words
    if "~" in date:
        raise _no_cron(expression, "it counts days from the end of the month (`~`)")
    year, month, day = date.split("-")
    hour, minute, second = time.split(":")
    if year != "*":
        raise _no_cron(expression, "it names years")
    if second != "00":
        raise _no_cron(expression, "it fires at seconds other than :00 (cron counts minutes)")
    if weekdays is not None and day != "*":
        raise _no_cron(expression, "it names both weekdays and days of the month (cron "
                                   "would fire on either, systemd fires on both)")
    fields = [_cron_field(minute, 0, 59, expression, "minute"),
              _cron_field(hour, 0, 23, expression, "hour"),
              _cron_field(day, 1, 31, expression, "day of the month"),
              _cron_field(month, 1, 12, expression, "month"),
              "*" if weekdays is None else _cron_weekdays(weekdays, expression)]
    return " ".join(fields)
