"""`bisect schedule add|ls|rm|run`: regression sweeps on a calendar, as systemd timers (or a
crontab line). The work is in ``orchestrator.sweeps.schedule``, ``.installed`` and
``.scheduled``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import (
    JsonOption,
    StoreOption,
    app,
    emit_json,
    error,
    out,
    progress,
    user_errors,
)

schedule_app = typer.Typer(no_args_is_help=True, help=(
    "Regression sweeps on a calendar: systemd timers (or a crontab line)."))
app.add_typer(schedule_app, name="schedule")

NameArg = Annotated[str, typer.Argument(metavar="NAME", help=(
    "The schedule: letters, digits, '_', '.', '-' (its units are bisect-sweep-NAME.*)."))]
UserOption = Annotated[bool, typer.Option(
    "--user", help="Your own systemd instance (~/.config/systemd/user), not the system's.")]


@contextmanager
def _answers() -> Iterator[None]:
    """Bad input (a name, a calendar, a store with a password, a sweep file) is exit 2 with one
    sentence; systemctl refusing is exit 1 with its words."""
    from orchestrator.sweeps.calendar import CalendarError
    from orchestrator.sweeps.installed import SystemctlFailed
    from orchestrator.sweeps.schedule import ScheduleError

    bad: tuple[type[Exception], ...] = (ScheduleError, CalendarError)
    try:
        from experiments.sweep import SweepError

        bad = (*bad, SweepError)
    except ImportError:
        pass
    try:
        yield
    except bad as exc:
        error(str(exc))
        raise typer.Exit(2) from None
    except SystemctlFailed as exc:
        error(str(exc))
        raise typer.Exit(1) from None


@schedule_app.command("add")
def add(name: NameArg,
        sweep_file: Annotated[Path, typer.Argument(metavar="SWEEP.yaml",
                                                   help="The sweep file.")],
        on_calendar: Annotated[str, typer.Option(
            "--on-calendar", help="When, as systemd writes it: '*-*-* 03:00', 'Mon..Fri 09:00', "
                                  "'hourly' (man systemd.time).")],
        user: UserOption = False, store: StoreOption = "bisect.db",
        crontab: Annotated[bool, typer.Option(
            "--crontab", help="Print the equivalent crontab line instead of installing.")]
        = False) -> None:
    """Run a sweep on a calendar: a systemd service and timer (Persistent: a run missed while the
    machine was off runs at boot)."""
    from orchestrator.sweeps import calendar
    from orchestrator.sweeps.installed import install, unit_dir
    from orchestrator.sweeps.schedule import (
        Schedule,
        bisect_program,
        check_name,
        check_sweep,
        crontab_line,
        unit_store,
    )

    with _answers():
        check_name(name)
        when = calendar.check(on_calendar)
        unit_url = unit_store(store)
        schedule = Schedule(name=name, calendar=on_calendar, sweep=check_sweep(sweep_file),
                            store=unit_url, program=bisect_program(), user=user)
        if crontab:
            print(crontab_line(schedule))
            progress("cron has no catch-up: a run missed while the machine was off is not run "
                     "at boot (a systemd timer's is)")
            return
        replaced = install(schedule)
    directory = unit_dir(user)
    out.print(f"{'replaced' if replaced else 'added'} schedule {name}: "
              f"{directory / schedule.timer} and {schedule.service}, next run "
              f"{when.next_elapse.isoformat(timespec='seconds')}", highlight=False, markup=False)


@schedule_app.command("ls")
def ls(user: UserOption = False, as_json: JsonOption = False) -> None:
    """The installed schedules: calendar, next and last run, how the last one ended."""
    from orchestrator.sweeps.installed import listing

    with _answers():
        rows = listing(user)
    if as_json:
        emit_json({"scope": "user" if user else "system", "schedules": rows})
        return
    if not rows:
        out.print(f"no schedule ({'--user' if user else 'system'}): `bisect schedule add` "
                  "makes one", highlight=False, markup=False)
        return
    for row in rows:
        ended = ("running now" if row["running"] else "never ran" if row["last_result"] is None
                 else f"last run {row['last_result']} (exit {row['last_exit_status']})")
        out.print(f"{row['name']}  {row['calendar']!r}  next {row['next'] or '-'}  "
                  f"last trigger {row['last'] or '-'}  {ended}  timer {row['timer'] or '?'}  "
                  f"sweep {row['sweep']}", highlight=False, markup=False)


@schedule_app.command("rm")
def rm(name: NameArg, user: UserOption = False) -> None:
    """Disable the schedule's timer and remove both units (a run under way finishes; the logs
    of its runs stay)."""
    from orchestrator.sweeps.installed import remove

    with _answers():
        schedule = remove(name, user)
    out.print(f"removed schedule {name} ({schedule.timer}, {schedule.service})",
              highlight=False, markup=False)


@schedule_app.command("run")
def run(name: NameArg, user: UserOption = False,
        sweep_file: Annotated[Path | None, typer.Option(
            "--sweep", help="What the schedule's service passes; by hand, leave it out: it is "
                            "read from the installed unit.")] = None,
        store: Annotated[str | None, typer.Option("--store", help="As --sweep.")] = None,
        on_calendar: Annotated[str | None, typer.Option(
            "--on-calendar", help="As --sweep.")] = None) -> None:
    """Run the schedule's sweep now, in the foreground, as its timer does (missed runs since the
    last one recorded first); the sweep's exit code."""
    from orchestrator.sweeps import scheduled
    from orchestrator.sweeps.installed import load
    from orchestrator.sweeps.schedule import (
        Schedule,
        ScheduleError,
        bisect_program,
        check_name,
        unit_store,
    )

    with user_errors(), _answers():  # user_errors: a store that fails is exit 1
        check_name(name)
        given = [sweep_file, store, on_calendar]
        if all(value is None for value in given):
            schedule = load(name, user)
        elif any(value is None for value in given):
            raise ScheduleError("--sweep, --store and --on-calendar go together (as the "
                                "schedule's service passes them), or none of them")
        else:
            assert sweep_file is not None and store is not None and on_calendar is not None
            schedule = Schedule(name=name, calendar=on_calendar,
                                sweep=Path(sweep_file).absolute(), store=unit_store(store),
                                program=bisect_program(), user=user)
        code = scheduled.run(schedule, progress)
    raise typer.Exit(code)
