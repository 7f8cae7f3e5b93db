"""The ``edgeops`` command. Each subcommand is a small module with ``add(subparsers)`` that
parses flags and calls a Python function of the same meaning; user errors become one line on
stderr and exit code 2."""
from __future__ import annotations

import argparse
import importlib
import sys

from edgeops._version import __version__
from edgeops.errors import EdgeOpsError

# explicit list of subcommand modules (edgeops/cli/<name>.py), in --help order
COMMANDS = ["demo", "inspect", "ops", "boards", "tune", "calibrate", "simulate", "sweep", "compile", "run", "quantize",
            "inspect_kernel", "deploy", "serve", "infer", "bench", "doctor", "keygen"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="edgeops", description="Take ONNX models onto edge hardware: inspect, tune, "
                "simulate, compile, deploy.")
    p.add_argument("--version", action="version", version=f"edgeops {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"edgeops.cli.{name}").add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:     # a bad flag (one line printed) or --help/--version: a status
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        rc = args.func(args)
    except EdgeOpsError as e:
        msg = " ".join(str(e).split("\n"))
        print(f"edgeops {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edgeops: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)
