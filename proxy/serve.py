"""The server's lifetime: start the sites, run until a signal, drain and stop.

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

Start-up fails fast with a :class:`StartupError` (one line for stderr): a port already in use,
a file that cannot be opened.

Ctrl-C (SIGINT) is a person at a terminal, not an orchestrator: no endpoint list routes to a
terminal, so the first skips the drain delay (the later steps still run: streams finish, rows
are written) and a second exits at once with status 130.

With ``listen.workers`` > 1 each worker runs ``serve`` here under the supervisor
(proxy/supervisor.py), which forwards these signals to each; the command line that reads the
flags and picks one or the other is ``proxy/cli.py``. This module never imports either.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from aiohttp import web

from proxy.app import make_admin_app, make_app, reload_keys
from proxy.config import Config
from proxy.errors import ProxyError
from proxy.eventloop import loop_name
from proxy.listeners import Held, ListenError, hold
from proxy.logs import get_logger
from proxy.pipeline.malformed import server_log
from proxy.pipeline.watchdog import WatchedRunner
from proxy.state import LIFECYCLE, METRICS, QUEUE, TASKS, WATCHDOG, WORKER, Lifecycle, WorkerInfo

# aiohttp cancels what is left this long after shutdown has cut the relays itself.
CUT_MARGIN_S = 1.0


class StartupError(ProxyError):
    """Why ``serve`` could not start, in one line for stderr."""


log = get_logger("gradeproxy.serve")


async def start_sites(
    config: Config, app: web.Application, held: Held | None = None
) -> tuple[list[web.AppRunner], list[web.BaseSite]]:
    """Start the proxy (and admin) sites; return them so the caller controls shutdown.

    The ports are held first (``held``, or :func:`hold_ports` here), so nothing the app opens
    at start (the results file) is touched by a start that cannot listen. Raises
    :class:`StartupError` (after undoing what started) when a port is taken or a file the app
    opens at start cannot be opened.
    """
    try:
        held = held or hold_ports(config)
    except ListenError as exc:
        raise StartupError(str(exc)) from None
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
        sites: list[web.BaseSite] = [web.SockSite(runner, sock) for sock in held.traffic]
        if held.admin:
            admin_runner = WatchedRunner(make_admin_app(app), watchdog, **options)
            runners.append(admin_runner)
            await admin_runner.setup()
            sites += [web.SockSite(admin_runner, sock) for sock in held.admin]
        for site in sites:
            await _start_site(site)
    except (OSError, StartupError) as exc:
        for started in reversed(runners):
            await started.cleanup()
        held.close()
        raise StartupError(str(exc) if isinstance(exc, StartupError) else _os_error(exc)) from None
    return runners, sites


def hold_ports(config: Config) -> Held:
    """Bind the traffic (and admin) ports, listening; :class:`ListenError` if one is taken."""
    # Workers share the traffic port (proxy/supervisor.py); the kernel spreads connections.
    traffic = hold(config.listen.host, config.listen.port, reuse_port=config.listen.workers > 1)
    if config.admin.port is None:
        return Held(traffic)
    try:
        admin = hold(config.admin.host or config.listen.host, config.admin.port)
    except ListenError:
        Held(traffic).close()
        raise
    return Held(traffic, admin)


async def _start_site(site: web.BaseSite) -> None:
    try:
        await site.start()
    except OSError as exc:
        raise StartupError(f"cannot listen on {site.name}: {exc.strerror or exc}") from None


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def bound_port(site: web.BaseSite) -> int:
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
        held = hold_ports(config)  # before anything opens a file
        app = make_app(config)
    except ListenError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        held.close()
        raise StartupError(_os_error(exc)) from None
    if worker is not None:
        app[WORKER] = worker
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = _Signals(loop, stop, app)
    with signals:
        runners, sites = await start_sites(config, app, held)
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
    """SIGTERM/SIGINT set ``stop``; a second SIGINT exits at once; SIGHUP reloads the tasks and
    the inbound keys' secrets, and reopens the results file."""

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
        queue = self.app.get(QUEUE)
        if queue is not None and queue.writer is not None:
            queue.writer.reopen()  # the results file too, as nginx's USR1 (docs/operations.md)
        reload_keys(self.app)  # and the inbound keys' secrets (a rotated secret_file)
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
