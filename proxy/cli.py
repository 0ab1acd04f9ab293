"""``gradeproxy serve`` and ``gradeproxy check-config``: flags to a config, then one server or many.

Start-up fails fast and in one line (exit 1), never with a traceback: a bad config, a task
set that does not load (``file:line: why``, unless ``tasks.allow_start_without``), a port
already in use, a file that cannot be opened.

The server's lifetime (signals, drain, shutdown: Kubernetes' timing) is ``proxy/serve.py``; with
``listen.workers`` > 1 this process is the supervisor of N such servers on one port
(proxy/supervisor.py), which forwards the signals to each. ``gradeproxy.cli`` calls ``run``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from proxy.config import Config, ConfigError, Route, Upstream, load_config, url_warnings
from proxy.eventloop import EventLoopError, loop_factory
from proxy.logs import configure_logging, get_logger
from proxy.pipeline.queue import GIL_SWITCH_INTERVAL_S
from proxy.serve import StartupError, serve

_LOOPBACK = ("127.0.0.1", "::1", "localhost")

log = get_logger("gradeproxy.serve")

# The config field each serve flag sets, so an error names the flag (``--port: ...``).
FLAGS = {
    "upstream.url": "--upstream",
    "tasks.path": "--tasks",
    "listen.host": "--host",
    "listen.port": "--port",
    "results.path": "--results",
    "listen.workers": "--workers",
    "server.event_loop": "--loop",
}


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, Any]] = {
        "upstream": {"url": args.upstream},
        "tasks": {"path": str(args.tasks) if args.tasks else None},
        "listen": {"host": args.host, "port": args.port, "workers": args.workers},
        "results": {"path": str(args.results) if args.results else None},
        "server": {"event_loop": getattr(args, "loop", None)},
    }
    return load_config(args.config, overrides, flags=FLAGS)


def run(name: str, args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"gradeproxy {name}: config error: {exc}", file=sys.stderr)
        return 1
    if name == "check-config":
        return _check(config)
    try:
        factory = loop_factory(config.server.event_loop)
    except EventLoopError as exc:
        print(f"gradeproxy serve: {exc}", file=sys.stderr)
        return 1
    configure_logging(config.logging.level, config.logging.format)
    if config.tasks.path is not None and not config.tasks.allow_start_without:
        error = _task_error(config)
        if error is not None:
            print(f"gradeproxy serve: tasks.path: {error}", file=sys.stderr)
            return 1
    if config.enforce.path is not None and not config.tasks.allow_start_without:
        error = _policy_error(config.enforce.path)
        if error is not None:
            print(f"gradeproxy serve: enforce.path: {error}", file=sys.stderr)
            return 1
    _warn_exposed_key(config)
    for warning in url_warnings(config):
        log.warning("config_warning", message=warning)
    if config.listen.workers > 1:
        from proxy.supervisor import supervise

        return supervise(config)
    # The grade thread must hand the GIL back to the event loop quickly (bench/loop_lag_bench.py).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(config))
    except StartupError as exc:
        print(f"gradeproxy serve: {exc}", file=sys.stderr)
        return 1
    return 0


def _task_error(config: Config) -> str | None:
    """Why the configured task set does not load (naming file:line), or None."""
    from grader.loader import load_tasks
    from grader.tasks import TaskLoadError

    assert config.tasks.path is not None
    try:
        load_tasks(config.tasks.path)
    except TaskLoadError as exc:
        return str(exc)
    return None


def _policy_error(path: Path) -> str | None:
    """Why the route policy file does not load (naming the policy and check), or None."""
    from grader.enforce import EnforceError
    from grader.route_policy import load_policies

    try:
        load_policies(path)
    except EnforceError as exc:
        return str(exc)
    return None


def _warn_exposed_key(config: Config) -> None:
    """Loudly, when anyone who reaches the port can spend the upstream key the proxy adds."""
    targets: list[Upstream | Route] = [config.upstream, *config.routes]
    shadows = [t.shadow.api_key_env for t in targets if t.shadow is not None]
    if not any([*(t.api_key_env for t in targets), *shadows]) or config.inbound_keys():
        return  # no key is added (default, routes, shadows), or clients need one
    if config.listen.host in _LOOPBACK:
        return
    message = (
        f"WARNING: the proxy adds an upstream API key and listens on {config.listen.host} "
        "with no inbound keys: anyone who can reach the port spends the key. "
        "Set auth.keys or auth.keys_env (docs/operations.md#inbound-keys) or listen on 127.0.0.1."
    )
    print(f"gradeproxy serve: {message}", file=sys.stderr)
    log.warning("upstream_key_exposed", host=config.listen.host, port=config.listen.port)


def _check(config: Config) -> int:
    if config.tasks.path is not None:
        from grader.loader import load_tasks
        from grader.tasks import TaskLoadError

        try:
            tasks = load_tasks(config.tasks.path)
        except TaskLoadError as exc:
            print(f"gradeproxy check-config: tasks.path: {exc}", file=sys.stderr)
            return 1
        print(f"tasks: {len(tasks)} loaded, digest {tasks.digest}")
    if config.pricing.path is not None:
        from grader.pricing import PriceTableError, load_prices

        try:
            prices = load_prices(config.pricing.path)
        except PriceTableError as exc:
            print(f"gradeproxy check-config: pricing.path: {exc}", file=sys.stderr)
            return 1
        print(f"pricing: {len(prices.models)} models priced")
    if config.enforce.path is not None:
        error = _policy_error(config.enforce.path)
        if error is not None:
            print(f"gradeproxy check-config: enforce.path: {error}", file=sys.stderr)
            return 1
        print("enforce: route policies loaded")
    for warning in url_warnings(config):
        print(f"gradeproxy check-config: warning: {warning}", file=sys.stderr)
    workers, admin = config.listen.workers, config.admin.port or 0
    print(
        f"config ok: upstream {config.upstream.url}, listening on "
        f"{config.listen.host}:{config.listen.port}"
        + (f" with {workers} workers (admin ports {admin}-{admin + workers - 1})" * (workers > 1))
    )
    return 0
