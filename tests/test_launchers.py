"""The matching rule of the proof of load for launchers (issue 29), on plain values: which
running process carries the variant when its start command is a wrapper script, a shell's ``-c``
or ``conda run``, and what is said of one that lost or changed a flag."""

from __future__ import annotations

import pytest

from deploy.launchers import (
    Carried,
    Process,
    carried,
    descendants,
    flag_problems,
    resembling,
    server,
    shell_hint,
)

pytestmark = pytest.mark.pure

SERVER = [b"/venv/bin/python", b"-m", b"sglang.launch_server"]
BASE = [b"--model-path", b"/m/ds", b"--tp", b"8"]
FLAGS = [b"--enable-hierarchical-cache", b"--mem-fraction-static", b"0.8"]
SCRIPT = b'source /venv/bin/activate && exec python -m sglang.launch_server "$@"'


def words(text: str) -> list[bytes]:
    return [w.encode() for w in text.split()]


@pytest.mark.parametrize(("start", "running", "launcher"), [
    # a wrapper script whose body ends `exec python -m sglang.launch_server "$@"`
    ([b"/srv/run.sh", *BASE], [*SERVER, *BASE], ["/srv/run.sh"]),
    # ... and one that adds its own arguments before "$@"
    ([b"/srv/run.sh", *BASE], [*SERVER, b"--host", b"0.0.0.0", *BASE], ["/srv/run.sh"]),
    # bash -c 'source venv/bin/activate && exec … "$@"' NAME ARGS: after $0, "$@" is passed on
    ([b"/bin/bash", b"-c", SCRIPT, b"sglang", *BASE], [*SERVER, *BASE],
     ["/bin/bash", "-c", SCRIPT.decode(), "sglang"]),
    ([b"bash", b"-lc", SCRIPT, b"sglang", *BASE], [*SERVER, *BASE],
     ["bash", "-lc", SCRIPT.decode(), "sglang"]),
    # conda run -n ENV python -m …: the server (a child) is the command conda runs, its
    # program found in the environment
    ([b"/opt/conda/bin/conda", b"run", b"-n", b"sgl", b"python", *SERVER[1:], *BASE],
     [b"/opt/conda/envs/sgl/bin/python", *SERVER[1:], *BASE],
     ["/opt/conda/bin/conda", "run", "-n", "sgl"]),
])
def test_a_launcher_that_passes_the_variant_on_carries_it(
        start: list[bytes], running: list[bytes], launcher: list[str]) -> None:
    assert carried([*running, *FLAGS], [*start, *FLAGS], len(start)) == Carried(
        "launcher", tuple(launcher))


def test_the_command_itself_by_path_and_by_shebang_as_before() -> None:
    argv = [b"python", *SERVER[1:], *BASE]
    assert carried(argv, argv, 2) == Carried("command")
    assert carried([b"/usr/bin/python", *argv[1:]], argv, 2) == Carried("path")
    assert carried([b"/bin/sh", b"/srv/run.sh", *BASE], [b"/srv/run.sh", *BASE], 1) == Carried(
        "shebang")


@pytest.mark.parametrize(("start", "running"), [
    # the wrapper dropped the last flag, or one in the middle
    ([b"/srv/run.sh", *BASE], [*SERVER, *BASE, *FLAGS[1:]]),
    ([b"/srv/run.sh", *BASE], [*SERVER, *BASE, FLAGS[0]]),
    # a value changed on the way
    ([b"/srv/run.sh", *BASE], [*SERVER, *BASE, *FLAGS[:2], b"0.9"]),
    # an argument after the variant's may override one of them
    ([b"/srv/run.sh", *BASE], [*SERVER, *BASE, *FLAGS, b"--mem-fraction-static", b"0.9"]),
    # `bash -c "… ARGS"` with the flags after the script: the first one became $0
    ([b"bash", b"-c", b"exec python -m sglang.launch_server --tp 8"], [*SERVER, b"--tp", b"8"]),
    # the same command with other arguments is not a launcher's doing
    ([b"python", *SERVER[1:], *BASE], [b"python", b"-m", b"other.server", *BASE]),
])
def test_a_process_that_lost_or_changed_a_variant_flag_does_not_carry_it(
        start: list[bytes], running: list[bytes]) -> None:
    assert carried(running, [*start, *FLAGS], len(start)) is None


def test_the_arguments_in_another_order_are_not_the_command() -> None:
    expected = words("python --tp serve.py 8")
    assert carried(words("python serve.py --tp 8"), expected, len(expected)) is None
    # the same value of another flag does not carry it either
    expected = words("python -m sglang.launch_server --tp 8")
    assert carried(words("python -m sglang.launch_server --dp 8"), expected, 3) is None


def test_the_variant_s_flags_are_named_when_missing_or_different() -> None:
    running = [*SERVER, *BASE, b"--mem-fraction-static=0.9"]
    assert flag_problems(running, FLAGS) == [
        "missing '--enable-hierarchical-cache'",
        "'--mem-fraction-static' is '0.9' in the process, the variant passes '0.8'"]
    assert flag_problems([*SERVER, b"--tp", b"4"], [b"--tp=8", b"--offset", b"-1"]) == [
        "'--tp' is '4' in the process, the variant passes '8'", "missing '--offset -1'"]
    assert flag_problems([*SERVER, *FLAGS], FLAGS) == []


def test_a_shell_that_took_a_flag_for_its_name_or_passed_nothing_on_says_so() -> None:
    start = [b"bash", b"-c", b"exec python -m sglang.launch_server --tp 8"]
    hint = shell_hint([*start, *FLAGS], len(start))
    assert "'--enable-hierarchical-cache' is lost; put a name for $0 after the script" in hint
    start = [b"bash", b"-c", b"exec python -m sglang.launch_server --tp 8", b"sglang"]
    assert 'end it with `exec … "$@"`' in shell_hint([*start, *FLAGS], len(start))
    start = [b"bash", b"-c", SCRIPT, b"sglang"]
    assert shell_hint([*start, *FLAGS], len(start)) == ""


def test_descendants_are_read_nearest_first_from_the_process_table() -> None:
    table = "1 0\n10 1\n12 10\n11 10\n20 11\n30 12\n99 1\n31 20\nnot a line\n"
    assert descendants(table, 10, 16) == [(11, 10, 1), (12, 10, 1), (20, 11, 2), (30, 12, 2),
                                          (31, 20, 3)]
    assert descendants(table, 10, 2) == [(11, 10, 1), (12, 10, 1)]
    assert descendants(table, 31, 16) == []


def test_the_server_is_the_deepest_process_that_carries_the_variant() -> None:
    start = [b"/opt/conda/bin/conda", b"run", b"-n", b"sgl", b"python", *SERVER[1:], *BASE]
    expected = [*start, *FLAGS]
    conda = Process(100, 1, 0, (b"/opt/conda/bin/python", *expected))  # a shebang script
    shell = Process(101, 100, 1, (b"/bin/bash", b"/tmp/tmpx8q2"))  # conda's activation
    sglang = Process(102, 101, 2, (b"/opt/conda/envs/sgl/bin/python", *SERVER[1:], *BASE,
                                   *FLAGS))
    scheduler = Process(103, 102, 3, (b"sglang::scheduler",))
    forked = Process(104, 102, 3, sglang.argv)  # a fork copies its parent's command line
    found = server([conda, shell, sglang, scheduler, forked], expected, len(start))
    assert found is not None and found[0] == sglang and found[1].how == "launcher"
    # with no child that carries it, the started process is the server
    found = server([conda, shell, scheduler], expected, len(start))
    assert found is not None and found[0] == conda and found[1].how == "shebang"


def test_nothing_carries_it_and_the_likeliest_process_is_described() -> None:
    start = [b"/srv/run.sh", *BASE]
    expected = [*start, *FLAGS]
    launcher = Process(100, 1, 0, (b"/bin/sh", b"/srv/other.sh"))
    dropped = Process(101, 100, 1, (*SERVER, *BASE, *FLAGS[1:]))
    assert server([launcher, dropped], expected, len(start)) is None
    assert resembling([launcher, dropped], expected) == dropped
    assert resembling([launcher, Process(101, 100, 1, None)], expected) == launcher
    # a launcher that stays and its child with the same words: the child is the server
    stays = Process(100, 1, 0, (b"/bin/sh", *start, *FLAGS[1:]))
    assert resembling([stays, dropped], expected) == dropped
    assert resembling([stays, Process(102, 100, 1, stays.argv)], expected) == stays  # a fork


def test_a_shell_c_script_that_execs_plain_words_is_read_as_the_command_it_runs() -> None:
    script = b"source /venv/bin/activate && exec python -m sglang.launch_server --tp 8"
    start = [b"bash", b"-c", script]
    running = [b"/venv/bin/python", b"-m", b"sglang.launch_server", b"--tp", b"8"]
    assert carried(running, start, len(start)) == Carried(
        "launcher", ("bash", "-c", script.decode()))
    assert carried([*running[:-1], b"4"], start, len(start)) is None  # another value
    # flags after a script without "$@" are lost (the first is its $0): not carried
    assert carried([*running, *FLAGS], [*start, *FLAGS], len(start)) is None
    # with "$@" and a name for $0 they are passed on, after the script's own words
    passing = [b"bash", b"-c", script + b' "$@"', b"sglang"]
    assert carried([*running, *FLAGS], [*passing, *FLAGS], len(passing)) is not None
    assert carried(running, [*passing, *FLAGS], len(passing)) is None
    # an expansion or an operator after the exec: the words are not known, nothing is read
    for other in (b"exec python -m sglang.launch_server --tp $TP",
                  b"exec python -m sglang.launch_server --tp 8 > /log"):
        assert carried(running, [b"bash", b"-c", other], 3) is None
