from __future__ import annotations

import argparse

import pytest

from gpudra_cli import commands
from gpudra_cli.errors import CliError
from gpudra_cli.main import build_parser, main


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: gpudra" in capsys.readouterr().out


def test_version_lists_dependencies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpudra ")
    assert "nats-py" in out


def test_cli_error_is_one_line_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise CliError("no such claim: default/x", exit_code=3)

    parser = argparse.ArgumentParser(prog="gpudra")
    parser.add_subparsers(dest="command").add_parser("get").set_defaults(func=boom)
    assert main(["get"], parser) == 3
    assert capsys.readouterr().err == "gpudra get: no such claim: default/x\n"


def test_unknown_command_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize(
    ("only", "expected"),
    [
        pytest.param(None, sorted(commands.NAMES), id="all"),
        pytest.param("version", ["version"], id="one"),
    ],
)
def test_each_module_registers_the_command_it_is_named_after(
    only: str | None, expected: list[str]
) -> None:
    """main imports only the module named by the first argument: the names must agree."""
    assert _commands(build_parser(only)) == expected


def test_loading_an_unknown_command_is_refused() -> None:
    with pytest.raises(ValueError, match="no command"):
        commands.load("os")


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        pytest.param(["allocate"], '{"id": "a", "claims": []}\n' * 100, id="allocate"),
        pytest.param(
            ["slices", "--profile", "dgx-h100", "--node", "n1", "-o", "json"], "", id="slices"
        ),
    ],
)
def test_a_reader_that_goes_away_ends_the_command_quietly(argv: list[str], stdin: str) -> None:
    # `gpudra ... | head -1`: the reader closes the pipe early. That is no error of gpudra's:
    # no traceback, no misleading message ("cannot read the problems on stdin"), and the exit
    # code of a process ended by SIGPIPE, as other command-line tools give.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudra_cli", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_a_broken_pipe_that_is_not_stdout_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only a closed stdout ends quietly; a BrokenPipeError from anything else is a real failure.
    def boom(args: argparse.Namespace) -> int:
        raise BrokenPipeError("a socket of ours")

    parser = argparse.ArgumentParser(prog="gpudra")
    parser.add_subparsers(dest="command").add_parser("get").set_defaults(func=boom)
    with pytest.raises(BrokenPipeError, match="a socket of ours"):
        main(["get"], parser)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        pytest.param(["get", "claims", "a", "-o", "wide"], ["a"], id="names-first"),
        pytest.param(["get", "claims", "-o", "wide", "a", "b"], ["a", "b"], id="names-after-flags"),
        pytest.param(["get", "claims", "-n", "ns", "a"], ["a"], id="namespace-then-name"),
        pytest.param(["delete", "claim", "-n", "ns", "a"], ["a"], id="delete"),
        pytest.param(["describe", "claim", "-n", "ns", "a"], ["a"], id="describe"),
    ],
)
def test_names_may_follow_the_flags_as_in_kubectl(argv: list[str], names: list[str]) -> None:
    from gpudra_cli.main import _parse, build_parser

    assert _parse(build_parser(argv[0]), argv).names == names


def test_an_unknown_flag_after_names_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from gpudra_cli.main import _parse, build_parser

    with pytest.raises(SystemExit) as exit_info:
        _parse(build_parser("get"), ["get", "claims", "a", "--frobnicate"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err
