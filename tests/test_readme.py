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
