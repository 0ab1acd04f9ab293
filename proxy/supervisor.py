"""``gradeproxy serve --workers N``: N server processes on one port, and the supervisor above them.

One event loop serves from one core, so a host with N cores serves N times the traffic with N
processes. They need no load balancer in front: every worker listens on the same port with
``SO_REUSEPORT`` and the kernel spreads new connections over them (by a hash of each
connection's addresses, so a kept-alive connection stays with its worker).

Each worker is the single-process server (``proxy.serve.serve``) with an admin port and a result
file of its own (``admin.port + i``, ``grades.w<i>.jsonl``): nothing is shared but the listening
port, so a worker's hot path costs what a single process's does. (Shared metrics would cost an
mmap write per update: docs/performance.md, Workers.)

The supervisor serves nothing. It starts the workers with ``spawn`` (a fresh interpreter each,
never a fork of a process that may already run a loop or threads); start-up fails in one line
(exit 1) when a worker cannot start. It forwards SIGHUP (reload the task set) and SIGTERM
(drain) to every worker, and Ctrl-C once: the workers are in a process group of their own, so
the terminal's SIGINT reaches only the supervisor (a second Ctrl-C is forwarded too: every
worker exits at once, 130). It exits when every worker has exited: 0 when all drained cleanly;
a worker still running past the drain delay + grace period + a margin is killed (exit 1). A
worker that dies while serving is restarted, up to ``MAX_RESTARTS`` within
``RESTART_WINDOW_S``; past that the supervisor stops the others and exits 1, for systemd (or
whoever started it) to see. A worker whose supervisor is killed drains itself: it watches a
pipe whose other end only the supervisor holds. The jobs of answered requests a dead worker had
not settled (its grade queue, its grading process) are counted from the slot's shared ledger
(proxy/pipeline/ledger.py): logged as ``worker_rows_lost`` and reported by the next generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from proxy.config import Config
from proxy.eventloop import loop_factory
from proxy.logs import configure_logging, get_logger
from proxy.pipeline.ledger import RESTARTS, close_generation, new_slot
from proxy.pipeline.queue import GIL_SWITCH_INTERVAL_S
from proxy.pipeline.record.results import worker_path
from proxy.serve import CUT_MARGIN_S, StartupError, serve
from proxy.state import WorkerInfo

log = get_logger("gradeproxy.supervisor")

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
EXIT_MARGIN_S = 10.0  # beyond drain + grace + CUT_MARGIN_S: a worker still running is killed
POLL_S = 0.25
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def worker_config(config: Config, index: int) -> Config:
    """Worker ``index``'s config: its own admin port and result file."""
    assert config.admin.port, "listen.workers > 1 needs admin.port (checked at load)"
    results = config.results
    if results.path is not None:
        results = replace(results, path=worker_path(results.path, index))
    results = replace(results, spill_path=worker_path(results.spill_path, index))
    admin = replace(config.admin, port=config.admin.port + index)
    return replace(config, results=results, admin=admin)


def worker_main(config: Config, info: WorkerInfo, ready: Connection, alive: Connection) -> None:
    """A worker process (spawned): serve until told to drain; say "ready" or why not."""
    os.setpgrp()  # the terminal's Ctrl-C reaches the supervisor only, which forwards it once
    import structlog

    configure_logging(config.logging.level, config.logging.format)
    structlog.contextvars.bind_contextvars(worker=info.index)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    watch = threading.Thread(target=_drain_when_orphaned, args=(alive,), daemon=True)
    watch.start()
    try:
        # The loop the supervisor checked before it spawned any worker (proxy/eventloop.py).
        with asyncio.Runner(loop_factory=loop_factory(config.server.event_loop)) as runner:
            runner.run(_serve(config, info, ready))
    except StartupError as exc:
        ready.send(("error", str(exc)))
        sys.exit(1)


async def _serve(config: Config, info: WorkerInfo, ready: Connection) -> None:
    started = asyncio.Event()
    serving = asyncio.create_task(serve(config, started=started, worker=info))
    waiting = asyncio.create_task(started.wait())
    await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if started.is_set():
        ready.send(("ready", ""))  # the signal handlers are installed and both sites listen
    waiting.cancel()
    await serving


def _drain_when_orphaned(alive: Connection) -> None:
    """The supervisor never writes here: the read ends (EOF) when its process is gone."""
    with contextlib.suppress(EOFError, OSError):
        alive.recv()
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass(slots=True)
class _Worker:
    index: int
    process: BaseProcess
    ready: Connection  # the worker says "ready" or ("error", why) here
    alive: Connection  # held open, never written: its EOF tells the worker we are gone
    started: bool = False
    reload_pending: bool = False  # a SIGHUP came before its handlers were installed
    error: str | None = None
    silent: bool = False  # its end of ``ready`` closed without a word (it died starting)


def reserve_port(config: Config) -> tuple[Config, socket.socket | None]:
    """Fail fast when the traffic port is taken, and pick the port when it is 0.

    Without this, a worker would join any ``SO_REUSEPORT`` group already on the port (another
    gradeproxy's, same user) and share its traffic. A fixed port is bound once without
    ``SO_REUSEPORT``, which fails while anything listens there. Port 0 is held by a bound (never
    listening) ``SO_REUSEPORT`` socket until the supervisor exits: the workers join it, and a
    socket that does not listen is given no connections.
    """
    host, port = config.listen.host, config.listen.port
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    probe = socket.socket(family, kind, proto)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners do
        if port == 0:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind(address)
    except OSError as exc:
        probe.close()
        where = f"http://{host}:{port}"  # as aiohttp names a site
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    if port != 0:
        probe.close()
        return config, None
    chosen: int = probe.getsockname()[1]
    return replace(config, listen=replace(config.listen, port=chosen)), probe


class Supervisor:
    def __init__(self, config: Config) -> None:
        self.config = config
        count, base = config.listen.workers, config.admin.port or 0
        ports = tuple(base + index for index in range(count))
        self.context = multiprocessing.get_context("spawn")
        self.infos = [
            WorkerInfo(index, count, ports, ledger=new_slot(self.context)) for index in range(count)
        ]
        self.workers: dict[int, _Worker] = {}
        self.stopping = False
        self.interrupts = 0
        self.deadline: float | None = None
        self.failed = False
        self.serving = False  # every worker has been ready once
        self.restarts: deque[float] = deque()

    def start(self, index: int) -> None:
        ready_in, ready_out = self.context.Pipe(duplex=False)
        alive_in, alive_out = self.context.Pipe(duplex=False)
        config = worker_config(self.config, index)
        process = self.context.Process(
            target=worker_main,
            args=(config, self.infos[index], ready_out, alive_in),
            name=f"gradeproxy-worker-{index}",
        )
        process.start()
        ready_out.close()
        alive_in.close()
        worker = self.workers[index] = _Worker(index, process, ready_in, alive_out)
        if self.stopping:  # the stop signal came while it was being started
            _send(worker, signal.SIGTERM)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            for worker in list(self.workers.values()):
                if worker.started:
                    _send(worker, signal.SIGHUP)
                else:
                    worker.reload_pending = True
            log.info("reload_forwarded", workers=len(self.workers))
            return
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts == 1:
                message = "gradeproxy: stopping every worker (in-flight requests finish; "
                print(message + "Ctrl-C again to exit now)", file=sys.stderr, flush=True)
        self.stop(signal.Signals(signum))

    def stop(self, signum: signal.Signals) -> None:
        """Forward ``signum`` to every worker; from the first stop on, exits are expected."""
        if not self.stopping:
            self.stopping = True
            shutdown = self.config.shutdown
            budget = shutdown.drain_delay_s + shutdown.grace_period_s + CUT_MARGIN_S
            self.deadline = time.monotonic() + budget + EXIT_MARGIN_S
            log.info("stopping_workers", signal=signum.name, workers=len(self.workers))
        for worker in list(self.workers.values()):
            _send(worker, signum)

    def run(self) -> int:
        for index in range(len(self.infos)):
            self.start(index)
        while self.workers:
            if self.deadline is not None and time.monotonic() > self.deadline:
                self._kill_the_rest()
                break
            waiting: list[Any] = [
                w.ready for w in self.workers.values() if not (w.started or w.silent)
            ]
            waiting += [w.process.sentinel for w in self.workers.values()]
            for handle in wait(waiting, timeout=POLL_S):
                self._handle(handle)
        if self.interrupts >= 2:
            return 130
        return 1 if self.failed else 0

    def _handle(self, handle: object) -> None:
        for worker in list(self.workers.values()):
            if handle is worker.ready:
                self._message(worker)
            elif handle == worker.process.sentinel:
                self._exited(worker)

    def _message(self, worker: _Worker) -> None:
        try:
            kind, text = worker.ready.recv()
        except (EOFError, OSError):  # it died before saying anything: its sentinel says so
            worker.silent = True
            return
        if kind == "error":
            worker.error = text
            return
        worker.started = True
        if worker.reload_pending:
            _send(worker, signal.SIGHUP)
        if not self.serving and all(w.started for w in self.workers.values()):
            self.serving = len(self.workers) == len(self.infos)
            if self.serving:
                log.info(
                    "workers_ready",
                    url=f"http://{self.config.listen.host}:{self.config.listen.port}/v1",
                    workers=len(self.infos),
                    admin_ports=list(self.infos[0].admin_ports),
                    pids=[w.process.pid for w in self.workers.values()],
                )

    def _exited(self, worker: _Worker) -> None:
        if not (worker.started or worker.silent) and worker.ready.poll():
            self._message(worker)  # why it could not start, sent just before it exited
        worker.process.join()
        code = worker.process.exitcode
        lost = close_generation(self.infos[worker.index].ledger)
        if lost:
            log.error("worker_rows_lost", worker=worker.index, exitcode=code, rows=lost)
        del self.workers[worker.index]
        worker.ready.close()
        worker.alive.close()
        if self.stopping:  # one that had not started yet may die of the signal itself
            if code != 0 and worker.started and self.interrupts < 2:
                log.error("worker_failed_to_drain", worker=worker.index, exitcode=code)
                self.failed = True
            return
        if not self.serving:  # the first start: fail fast, in one line
            why = worker.error or f"exited with status {code} before it was ready"
            print(f"gradeproxy serve: worker {worker.index}: {why}", file=sys.stderr, flush=True)
            self.failed = True
            self.stop(signal.SIGTERM)
            return
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > RESTART_WINDOW_S:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_RESTARTS:
            log.error(
                "workers_failing",
                worker=worker.index,
                exitcode=code,
                error=worker.error,
                restarts=len(self.restarts),
                window_s=RESTART_WINDOW_S,
            )
            self.failed = True
            self.stop(signal.SIGTERM)
            return
        self.restarts.append(now)
        self.infos[worker.index].ledger[RESTARTS] += 1
        log.error("worker_restarted", worker=worker.index, exitcode=code, error=worker.error)
        self.start(worker.index)

    def _kill_the_rest(self) -> None:
        for worker in list(self.workers.values()):
            log.error("worker_killed", worker=worker.index, reason="past the shutdown budget")
            worker.process.kill()
            worker.process.join()
            del self.workers[worker.index]
        self.failed = True


def _send(worker: _Worker, signum: signal.Signals) -> None:
    pid = worker.process.pid
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):  # it exited just now: its sentinel says so
            os.kill(pid, signum)


def supervise(config: Config) -> int:
    """``gradeproxy serve`` with ``listen.workers`` > 1; returns the exit status."""
    try:
        config, holder = reserve_port(config)
    except StartupError as exc:
        print(f"gradeproxy serve: {exc}", file=sys.stderr)
        return 1
    supervisor = Supervisor(config)
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in STOP_SIGNALS}
    try:
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if holder is not None:
            holder.close()
