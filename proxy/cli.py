"""``gradeproxy serve`` and ``gradeproxy check-config``.

Shutdown follows Kubernetes' timing rather than aiohttp's default (which stops listening the
moment SIGTERM arrives, while endpoints still route traffic to the pod):

1. SIGTERM: ``/readyz`` turns 503; traffic is still served for ``shutdown.drain_delay_s``.
2. The listener closes; requests on kept-alive connections get 503 ``server_draining``.
3. In-flight streams get ``shutdown.grace_period_s`` to finish.
4. The grade queue drains and the results file is flushed: no graded row is lost.

Ctrl-C (SIGINT) is a person at a terminal, not an orchestrator: no endpoint list routes to a
terminal, so the first skips the drain delay (steps 2-4 still run: streams finish, rows are
written) and a second exits at once with status 130.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

from aiohttp import web

from proxy.app import make_admin_app, make_app
from proxy.config import Config, ConfigError, load_config, url_warnings
from proxy.grading import GIL_SWITCH_INTERVAL_S
from proxy.logs import configure_logging, get_logger
from proxy.state import LIFECYCLE, TASKS

log = get_logger("gradeproxy.serve")


# The config field each serve flag sets, so an error names the flag (``--port: ...``).
FLAGS = {
    "upstream.url": "--upstream",
    "tasks.path": "--tasks",
    "listen.host": "--host",
    "listen.port": "--port",
    "results.path": "--results",
}


def config_from_args(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, Any]] = {
        "upstream": {"url": args.upstream},
        "tasks": {"path": str(args.tasks) if args.tasks else None},
        "listen": {"host": args.host, "port": args.port},
        "results": {"path": str(args.results) if args.results else None},
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
    configure_logging(config.logging.level, config.logging.format)
    for warning in url_warnings(config):
        log.warning("config_warning", message=warning)
    # The grade thread must hand the GIL back to the event loop quickly (bench/loop_lag_bench.py).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    asyncio.run(serve(config))
    return 0


def _check(config: Config) -> int:
    if config.tasks.path is not None:
        from grader.tasks import TaskLoadError, load_tasks

        try:
            tasks = load_tasks(config.tasks.path)
        except TaskLoadError as exc:
            print(f"gradeproxy check-config: tasks.path: {exc}", file=sys.stderr)
            return 1
        print(f"tasks: {len(tasks)} loaded, digest {tasks.digest}")
    for warning in url_warnings(config):
        print(f"gradeproxy check-config: warning: {warning}", file=sys.stderr)
    print(
        f"config ok: upstream {config.upstream.url}, listening on "
        f"{config.listen.host}:{config.listen.port}"
    )
    return 0


async def start_sites(
    config: Config, app: web.Application
) -> tuple[list[web.AppRunner], list[web.TCPSite]]:
    """Start the proxy (and admin) sites; return them so the caller controls shutdown."""
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=config.shutdown.grace_period_s
    )
    await runner.setup()
    runners = [runner]
    sites = [web.TCPSite(runner, config.listen.host, config.listen.port)]
    if config.admin.port is not None:
        admin_runner = web.AppRunner(make_admin_app(app), handle_signals=False, access_log=None)
        await admin_runner.setup()
        runners.append(admin_runner)
        sites.append(
            web.TCPSite(admin_runner, config.admin.host or config.listen.host, config.admin.port)
        )
    for site in sites:
        await site.start()
    return runners, sites


def bound_port(site: web.TCPSite) -> int:
    server = site._server  # aiohttp exposes no public accessor for an ephemeral port
    if server is None or not hasattr(server, "sockets"):
        raise RuntimeError("the site is not listening")
    port: int = server.sockets[0].getsockname()[1]
    return port


async def serve(
    config: Config, stop: asyncio.Event | None = None, started: asyncio.Event | None = None
) -> None:
    """Run until SIGTERM/SIGINT (or ``stop``), then shut down gracefully."""
    app = make_app(config)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = _Signals(loop, stop, app)
    with signals:
        runners, sites = await start_sites(config, app)
        log.info(
            "listening",
            url=f"http://{config.listen.host}:{bound_port(sites[0])}/v1",
            upstream=config.upstream.url,
            config=config.redacted(),
        )
        if started is not None:
            started.set()
        await stop.wait()
        delay = 0.0 if signals.interrupted else config.shutdown.drain_delay_s
        await shutdown(config, app, runners, drain_delay_s=delay)


async def shutdown(
    config: Config,
    app: web.Application,
    runners: list[web.AppRunner],
    drain_delay_s: float | None = None,
) -> None:
    """Drain and stop; ``drain_delay_s`` (default: the config's) is 0 after a Ctrl-C."""
    delay = config.shutdown.drain_delay_s if drain_delay_s is None else drain_delay_s
    lifecycle = app[LIFECYCLE]
    lifecycle.draining = True
    log.info("draining", delay_s=delay, grace_s=config.shutdown.grace_period_s)
    await asyncio.sleep(delay)
    lifecycle.refusing = True
    # Stops the listeners, waits up to grace_period_s for in-flight handlers, then unwinds the
    # cleanup contexts: the grade queue drains, then the results file is flushed and closed.
    for runner in runners:
        await runner.cleanup()
    log.info("stopped")


class _Signals:
    """SIGTERM/SIGINT set ``stop``; a second SIGINT exits at once; SIGHUP reloads the tasks."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event, app: web.Application
    ) -> None:
        self.loop, self.stop, self.app = loop, stop, app
        self._reloads: set[asyncio.Task[bool]] = set()
        self.interrupted = False  # the stop came from Ctrl-C: skip the drain delay

    def _interrupt(self) -> None:
        if self.interrupted:
            # The person asked twice: stop waiting for streams and the queue. Rows already
            # written are flushed (the writer flushes per batch); the rest are given up.
            print("gradeproxy: second Ctrl-C, exiting now", file=sys.stderr, flush=True)
            os._exit(130)
        self.interrupted = True
        if not self.stop.is_set():
            print(
                "gradeproxy: stopping (in-flight requests finish; Ctrl-C again to exit now)",
                file=sys.stderr,
                flush=True,
            )
        self.stop.set()

    def _reload(self) -> None:
        task = self.loop.create_task(self.app[TASKS].reload())
        self._reloads.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._reloads.discard)

    def __enter__(self) -> None:
        self.loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        self.loop.add_signal_handler(signal.SIGINT, self._interrupt)
        self.loop.add_signal_handler(signal.SIGHUP, self._reload)

    def __exit__(self, *exc: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.loop.remove_signal_handler(sig)
