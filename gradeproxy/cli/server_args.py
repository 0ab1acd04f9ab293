"""Arguments of the server commands, declared here so ``--help`` never imports the server."""

from __future__ import annotations

import argparse
from pathlib import Path

ENVIRONMENT_HELP = (
    "Every config field can also be set from the environment as GRADEPROXY_<SECTION>_<FIELD> "
    "(GRADEPROXY_UPSTREAM_URL, GRADEPROXY_LOGGING_LEVEL=debug, GRADEPROXY_GRADING_WORKERS=4). "
    "Precedence, lowest first: defaults, --config file, environment, flags. "
    "`gradeproxy config-schema` prints the file's JSON Schema."
)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """``--help`` shows each option's default, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = not any(action.default is none for none in (None, False, argparse.SUPPRESS))
        if shown and "%(default)" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file (see README)")


def add_config_schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the configuration reference (docs/configuration.md) instead of the schema",
    )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--upstream",
        help="base URL of the OpenAI-compatible backend, e.g. "
        "http://127.0.0.1:8000/v1 (overrides upstream.url)",
    )
    # The defaults shown are the config's (tests/proxy/config/test_config.py keeps them equal).
    parser.add_argument("--tasks", type=Path, help="task file or folder (overrides tasks.path)")
    parser.add_argument(
        "--host", help="listen address (overrides listen.host; config default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, help="listen port (overrides listen.port; config default: 8080)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="result rows file (overrides results.path; config default: results/grades.jsonl);"
        " with N workers one file each: grades.w0.jsonl ... grades.w<N-1>.jsonl",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="server processes sharing the port (SO_REUSEPORT), for a VM or bare host;"
        " in Kubernetes scale replicas instead (overrides listen.workers; config default: 1;"
        " more than 1 needs admin.port: worker i serves /metrics on admin.port + i)",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        help="event loop (overrides server.event_loop; config default: auto, which takes "
        "uvloop when it is installed: pip install 'gradeproxy[uvloop]')",
    )


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        type=Path,
        default=None,
        help="task file or folder (default: the sample suite shipped in the package)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument("--port", type=int, default=8080, help="proxy port (0: any free port)")
    parser.add_argument("--backend-port", type=int, default=0, help="demo backend port")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the task suite")
    parser.add_argument(
        "--exit",
        action="store_true",
        help="exit after the scoreboard (without it the demo keeps serving until Ctrl-C)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("results/demo.jsonl"),
        help="where the proxy writes result rows",
    )


def add_demo_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, default=None, help="task file or folder")
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument("--port", type=int, default=8000, help="listen port")
