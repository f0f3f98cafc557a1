"""Command line: ``gpucap estimate | plan | frontier | simulate | validate | calibrate | errors | telemetry | gpus |
models``.

One module per command (``gpucap.cli.<command>``: its options and what it runs); this one
builds the parser and turns errors into one line each: bad input exits 2, a model that does not
fit exits 3, with the options that would fit as this command's flags. Never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpucap.cli import calibrate, catalog, errors, estimate, frontier, plan, simulate, telemetry, validate
from gpucap.errors import DoesNotFit, UnknownName
from gpucap.parallel import WorkerDied
from gpucap.version import __version__

COMMANDS = {
    "estimate": (estimate.add_parser, estimate.run),
    "plan": (plan.add_parser, plan.run),
    "frontier": (frontier.add_parser, frontier.run),
    "simulate": (simulate.add_parser, simulate.run),
    "validate": (validate.add_parser, validate.run),
    "calibrate": (calibrate.add_parser, calibrate.run),
    "errors": (errors.add_parser, errors.run),
    "telemetry": (telemetry.add_parser, telemetry.run),
    "gpus": (None, catalog.run_gpus),
    "models": (None, catalog.run_models),
}
# What a DoesNotFit's options are as flags of `gpucap estimate` / `gpucap plan`.
OPTION_FLAGS = {
    "fp8 weights": "--weight-dtype fp8",
    "nvfp4 weights": "--weight-dtype nvfp4",
    "int4 weights": "--weight-dtype int4",
    "fp8 KV cache": "--kv-dtype fp8",
    "more GPUs per replica": "a larger --tp or --pp",
    "a GPU with more memory": "another --gpu (`gpucap gpus` lists them)",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage block) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line: every command and its options."""
    p = _Parser(prog="gpucap", description="LLM serving capacity from first principles.")
    p.add_argument("--version", action="version", version=f"gpucap {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add, _ in COMMANDS.values():
        if add is not None:
            add(sub)
    catalog.add_parsers(sub)
    return p


def as_flags(option: str) -> str:
    """An option of ``DoesNotFit.options`` as the flags that ask for it."""
    if option.startswith("tp x pp = "):
        return f"--tp and --pp whose product is {option.split('=')[1].split()[0]} or more"
    return OPTION_FLAGS.get(option, option)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command][1](args)
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT, nothing half-written
        print(f"gpucap {args.command}: interrupted", file=sys.stderr)
        return 130
    except DoesNotFit as exc:
        flags = f" (as flags: {'; or '.join(as_flags(o) for o in exc.options)})" if exc.options else ""
        print(f"gpucap: does not fit: {exc}{flags}", file=sys.stderr)
        return 3
    except UnknownName as exc:
        hint = {"GPU": " (`gpucap gpus` lists all; add your own with --gpu-file)"}.get(exc.kind, "")
        print(f"gpucap: error: {exc}{hint}", file=sys.stderr)
        return 2
    except (ValueError, WorkerDied) as exc:  # a note names the row or task it came from
        print(" ".join([f"gpucap: error: {exc}", *getattr(exc, "__notes__", ())]), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
