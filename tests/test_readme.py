"""The README's figures are the ones its commands print: its `gpucap estimate` example is run
here and the recommendation it quotes must be in the output."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpucap.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def command_after(heading: str) -> list[str]:
    """The first ``.venv/bin/gpucap ...`` command of the sh block after ``heading``, as argv."""
    text = README.read_text()
    block = text[text.index(heading) :].split("```sh", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ").strip().splitlines()[0]
    argv = shlex.split(joined)
    assert argv[0] == ".venv/bin/gpucap", argv
    return argv[1:]


def test_the_estimate_example_prints_what_the_readme_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = command_after("## From the command line")
    assert argv[0] == "estimate"
    quoted = re.search(r'\("(recommended concurrency: [\d,]+ \(80% range [\d,]+-[\d,]+\))"', README.read_text())
    assert quoted, "the README quotes the estimate's recommendation"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert quoted.group(1) in out
    binds = re.search(r'\("(the TPOT SLO binds at [^"]+)"\)', README.read_text().replace("\n", " "))
    assert binds, "the README quotes why the recommendation binds"
    assert binds.group(1) in out


def readme_commands() -> list[tuple[int, list[str]]]:
    """``(line, argv)`` of every ``.venv/bin/gpucap`` command in the README's sh blocks, its
    continuation lines joined and its comment left out; commands with a placeholder (``...``)
    or a shell substitution are left out."""
    lines = README.read_text().splitlines()
    found, in_block, k = [], False, 0
    while k < len(lines):
        line = lines[k]
        if line.startswith("```"):
            in_block = line.strip() == "```sh"
        elif in_block and line.startswith(".venv/bin/gpucap "):
            start, text = k + 1, line
            while text.rstrip().endswith("\\"):
                k += 1
                text = text.rstrip()[:-1] + " " + lines[k].strip()
            if "..." not in text and "$(" not in text:
                found.append((start, shlex.split(text, comments=True)[1:]))
        k += 1
    return found


def test_every_readme_command_is_one_the_command_line_takes() -> None:
    """A flag renamed or removed in the command line fails here with the README line that still
    shows it (parsing only: nothing is run)."""
    from gpucap.cli.main import build_parser

    commands = readme_commands()
    assert len(commands) >= 10, commands
    for line, argv in commands:
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"README.md line {line}: gpucap {shlex.join(argv)} does not parse") from exc
