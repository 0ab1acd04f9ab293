"""The ``gradeproxy`` console script.

Offline commands live here and import only ``grader``; the server commands import ``proxy``
lazily so ``gradeproxy grade`` works (and starts fast) without the server stack.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from gradeproxy.cli import (
    calibrate,
    compare,
    db,
    export,
    grade,
    import_cmd,
    mcp,
    regrade,
    replay,
    server_args,
    tasks_cmd,
    validate,
)
from grader.version import __version__

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


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradeproxy", description="Grade LLM tool calls, offline or as a live proxy."
    )
    parser.add_argument("--version", action="version", version=f"gradeproxy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    grade.register(sub)
    mcp.register(sub)
    calibrate.register(sub)
    validate.register(sub)
    compare.register(sub)
    replay.register(sub)
    import_cmd.register(sub)
    export.register(sub)
    regrade.register(sub)
    db.register(sub)
    tasks_cmd.register(sub)
    for name, (module_name, help_text, add_arguments) in _SERVER_COMMANDS.items():
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
    parser = _build_parser()
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        command: argparse.ArgumentParser = getattr(args, "_parser", parser)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if hasattr(args, "_runner"):
        module_name, name = args._runner
        runner: Callable[[str, argparse.Namespace], int] = importlib.import_module(module_name).run
        return runner(name, args)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
