"""``gradeproxy serve`` and ``gradeproxy check-config``.

Shutdown follows Kubernetes' timing rather than aiohttp's default (which stops listening the
moment SIGTERM arrives, while endpoints still route traffic to the pod):

1. SIGTERM: ``/readyz`` turns 503; traffic is still served for ``shutdown.drain_delay_s``.
2. The listener closes; requests on kept-alive connections get 503 ``server_draining``.
3. In-flight streams get ``shutdown.grace_period_s`` to finish.
4. At the end of the grace period the proxy cuts what is still in flight itself: a stream
   ends with an in-band ``server_draining`` error, a request still waiting for its upstream
   gets a 503, and both are logged with ``cut="shutdown"`` and skipped as ``shutdown``
   (not as client disconnects); one second later aiohttp cancels anything left.
5. The grade queue drains and the results file is flushed: no graded row is lost.

Start-up fails fast and in one line (exit 1), never with a traceback: a bad config, a task
set that does not load (``file:line: why``, unless ``tasks.allow_start_without``), a port
already in use, a file that cannot be opened.

Ctrl-C (SIGINT) is a person at a terminal, not an orchestrator: no endpoint list routes to a
terminal, so the first skips the drain delay (the later steps still run: streams finish, rows
are written) and a second exits at once with status 130.

With ``listen.workers`` > 1 this process is the supervisor of N such servers on one port
(proxy/supervisor.py), which forwards these signals to each.
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
from proxy.config import Config, ConfigError, Route, Upstream, load_config, url_warnings
from proxy.errors import ProxyError
from proxy.eventloop import EventLoopError, loop_factory, loop_name
from proxy.logs import configure_logging, get_logger
from proxy.pipeline.malformed import server_log
from proxy.pipeline.queue import GIL_SWITCH_INTERVAL_S
from proxy.pipeline.watchdog import WatchedRunner
from proxy.state import LIFECYCLE, METRICS, TASKS, WATCHDOG, WORKER, Lifecycle, WorkerInfo

# aiohttp cancels what is left this long after shutdown has cut the relays itself.
CUT_MARGIN_S = 1.0
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class StartupError(ProxyError):
    """Why ``serve`` could not start, in one line for stderr."""


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
        "Set auth.keys_env (docs/operations.md#inbound-keys) or listen on 127.0.0.1."
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
    for warning in url_warnings(config):
        print(f"gradeproxy check-config: warning: {warning}", file=sys.stderr)
    workers, admin = config.listen.workers, config.admin.port or 0
    print(
        f"config ok: upstream {config.upstream.url}, listening on "
        f"{config.listen.host}:{config.listen.port}"
        + (f" with {workers} workers (admin ports {admin}-{admin + workers - 1})" * (workers > 1))
    )
    return 0


async def start_sites(
    config: Config, app: web.Application
) -> tuple[list[web.AppRunner], list[web.TCPSite]]:
    """Start the proxy (and admin) sites; return them so the caller controls shutdown.

    Raises :class:`StartupError` (after undoing what started) when a port is taken or a file
    the app opens at start cannot be opened.
    """
    watchdog = app[WATCHDOG]
    client = config.client
    options = {
        "handle_signals": False,
        "access_log": None,
        "auto_decompress": False,  # request bodies are forwarded as the client encoded them
        # aiohttp's own idle close is only a backstop behind the watchdog's phases.
        "keepalive_timeout": client.idle_timeout_s + client.header_timeout_s + 5,
        # A request aiohttp refuses: one JSON line and a count, not a traceback.
        "logger": server_log(app[METRICS]),
    }
    runner = WatchedRunner(
        app, watchdog, shutdown_timeout=config.shutdown.grace_period_s + CUT_MARGIN_S, **options
    )
    runners: list[web.AppRunner] = []
    try:
        runners.append(runner)  # cleaned up even when setup fails half-way
        await runner.setup()
        # Workers share the traffic port (proxy/supervisor.py); the kernel spreads connections.
        reuse_port = True if config.listen.workers > 1 else None
        sites = [web.TCPSite(runner, config.listen.host, config.listen.port, reuse_port=reuse_port)]
        if config.admin.port is not None:
            admin_runner = WatchedRunner(make_admin_app(app), watchdog, **options)
            runners.append(admin_runner)
            await admin_runner.setup()
            sites.append(
                web.TCPSite(
                    admin_runner, config.admin.host or config.listen.host, config.admin.port
                )
            )
        for site in sites:
            await _start_site(site)
    except (OSError, StartupError) as exc:
        for started in reversed(runners):
            await started.cleanup()
        raise StartupError(str(exc) if isinstance(exc, StartupError) else _os_error(exc)) from None
    return runners, sites


async def _start_site(site: web.TCPSite) -> None:
    try:
        await site.start()
    except OSError as exc:
        raise StartupError(f"cannot listen on {site.name}: {exc.strerror or exc}") from None


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def bound_port(site: web.TCPSite) -> int:
    server = site._server  # aiohttp exposes no public accessor for an ephemeral port
    if server is None or not hasattr(server, "sockets"):
        raise RuntimeError("the site is not listening")
    port: int = server.sockets[0].getsockname()[1]
    return port


async def serve(
    config: Config,
    stop: asyncio.Event | None = None,
    started: asyncio.Event | None = None,
    worker: WorkerInfo | None = None,
) -> None:
    """Run until SIGTERM/SIGINT (or ``stop``), then shut down gracefully; ``worker``: this is
    one of ``listen.workers`` processes (proxy/supervisor.py)."""
    try:
        app = make_app(config)
    except OSError as exc:
        raise StartupError(_os_error(exc)) from None
    if worker is not None:
        app[WORKER] = worker
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = _Signals(loop, stop, app)
    with signals:
        runners, sites = await start_sites(config, app)
        log.info(
            "listening",
            url=f"http://{config.listen.host}:{bound_port(sites[0])}/v1",
            upstream=config.upstream.url,
            event_loop=loop_name(loop),
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
    # At the end of the grace period, cut what is left with a reason of its own (CUT_MARGIN_S
    # before aiohttp's own cancellation, which would look like a client disconnect).
    loop = asyncio.get_running_loop()
    cutter = loop.call_later(config.shutdown.grace_period_s, _cut, lifecycle)
    # Stops the listeners, waits up to the grace period for in-flight handlers, then unwinds
    # the cleanup contexts: the grade queue drains, then the results file is flushed and closed.
    try:
        for runner in runners:
            await runner.cleanup()
    finally:
        cutter.cancel()
    log.info("stopped")


def _cut(lifecycle: Lifecycle) -> None:
    cut = lifecycle.cut_relays("shutdown")
    if cut:
        log.warning("grace_period_ended", cut=cut)


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
