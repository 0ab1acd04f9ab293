"""The ``gradeproxy`` console script.

Offline commands live here and import only ``grader``; the server commands import ``proxy``
lazily so ``gradeproxy grade`` works (and starts fast) without the server stack. A command
line that names its command imports that command's module alone (``gradeproxy grade`` never
imports the MCP server, calibration or Parquet export code); ``--help``, no command or an
unknown one builds the whole parser, so the usage lists every command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from gradeproxy.cli import server_args
from grader.version import __version__

# Offline command name -> its module (which has register(sub)), in the order usage lists them.
_OFFLINE_COMMANDS: dict[str, str] = {
    "grade": "gradeproxy.cli.grade",
    "mcp": "gradeproxy.cli.mcp",
    "calibrate": "gradeproxy.cli.calibrate",
    "validate-tasks": "gradeproxy.cli.validate",
    "compare": "gradeproxy.cli.compare",
    "replay": "gradeproxy.cli.replay",
    "import": "gradeproxy.cli.import_cmd",
    "export": "gradeproxy.cli.export",
    "regrade": "gradeproxy.cli.regrade",
    "db": "gradeproxy.cli.db",
    "tasks": "gradeproxy.cli.tasks_cmd",
}

# name -> (runner module, help, argument declarations); runners expose run(name, args) -> int.
_SERVER_COMMANDS: dict[str, tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = {
    "serve": ("proxy.cli", "run the grading proxy", server_args.add_serve_arguments),
    "check-config": (
        "proxy.cli",
        "validate a proxy config file and exit 0/1",
        server_args.add_serve_arguments,
    ),
    "config-schema": (
        "proxy.config.schema",
        "print the config file's JSON Schema (generated from the code) for editors and CI",
        server_args.add_config_schema_arguments,
    ),
    "demo": (
        "proxy.demo.cli",
        "run the live demo: proxy, demo backend, sample traffic, scoreboard",
        server_args.add_demo_arguments,
    ),
    "demo-backend": (
        "proxy.demo.cli",
        "run only the deterministic demo backend",
        server_args.add_demo_backend_arguments,
    ),
}


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or ``only`` that one (its module alone is
    imported: the start-up of a command is its own imports, not every command's)."""
    parser = argparse.ArgumentParser(
        prog="gradeproxy", description="Grade LLM tool calls, offline or as a live proxy."
    )
    parser.add_argument("--version", action="version", version=f"gradeproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in _OFFLINE_COMMANDS.items():
        if only is None or only == name:
            importlib.import_module(module_name).register(sub)
    for name, (module_name, help_text, add_arguments) in _SERVER_COMMANDS.items():
        if only is not None and only != name:
            continue
        command = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=server_args.ENVIRONMENT_HELP if name in ("serve", "check-config") else None,
        )
        add_arguments(command)
        command.set_defaults(_runner=(module_name, name))
    for command in sub.choices.values():
        # A bad flag is reported with the usage of the subcommand it was given to.
        command.set_defaults(_parser=command)
        command.formatter_class = server_args.DefaultsHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    named = args_list[0] if args_list else None
    known = named in _OFFLINE_COMMANDS or named in _SERVER_COMMANDS
    parser = _build_parser(named if known else None)
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        command: argparse.ArgumentParser = getattr(args, "_parser", parser)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if hasattr(args, "_runner"):
        module_name, name = args._runner
        runner: Callable[[str, argparse.Namespace], int] = importlib.import_module(module_name).run
        return runner(name, args)
    handler: Callable[[argparse.Namespace], int] = args.handler
    code = handler(args)
    if argv is None and args.command in _EXIT_AT_ONCE:
        _exit_at_once(code)
    return code


# Commands that, run as the console script, leave as soon as their output is out: a graded
# run holds every task, answer and row until the end, and freeing them one by one at
# interpreter shutdown was a tenth of the command's CPU time (docs/performance.md, BFCL).
_EXIT_AT_ONCE = frozenset({"grade"})


def _exit_at_once(code: int) -> None:
    """Flush stdout and stderr and end the process without the interpreter's teardown (what
    mypy does for the same reason). Output files are written, synced and closed by then; a
    flush that fails returns instead, for the ordinary exit to report as it always has."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
