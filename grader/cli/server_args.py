"""Arguments of the server commands, declared here so ``--help`` never imports the server."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file (see README)")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--upstream",
        help="base URL of the OpenAI-compatible backend, e.g. "
        "http://127.0.0.1:8000/v1 (overrides upstream.url)",
    )
    parser.add_argument("--tasks", type=Path, help="task file or folder (overrides tasks.path)")
    parser.add_argument("--host", help="listen address (overrides listen.host)")
    parser.add_argument("--port", type=int, help="listen port (overrides listen.port)")
    parser.add_argument("--results", type=Path, help="result rows file (overrides results.path)")


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        type=Path,
        default=None,
        help="task file or folder (default: the sample suite in config/tasks)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument("--port", type=int, default=8080, help="proxy port (0: any free port)")
    parser.add_argument("--backend-port", type=int, default=0, help="demo backend port")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the task suite")
    parser.add_argument("--exit", action="store_true", help="exit after the scoreboard")
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
