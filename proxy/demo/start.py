"""How ``gradeproxy demo`` and ``demo-backend`` start and stop: checks, ports, then files.

A second demo started by mistake (the first keeps serving) must not cost the first one a row: so
the task file is checked, then both ports are held (proxy/listeners.py), and only then is the
results file claimed. The claim is an exclusive ``flock`` on the file itself: a demo that holds
its ports but not the file (another demo on ``--port 0`` with the same ``--results``) stops
there, and the file is emptied (truncated through the locked descriptor) only by its owner.

Every start failure is one line and exit status 1 (:class:`DemoStartError`); SIGINT and SIGTERM
stop both commands even when a script started them in the background (where the shell leaves
SIGINT ignored, so Python's KeyboardInterrupt never comes).

Never opens or truncates a file before the ports are held.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from grader.tasks import TaskLoadError
from proxy.demo.answers import load_demo_tasks
from proxy.errors import ProxyError
from proxy.listeners import ListenError, held_port, hold


class DemoStartError(ProxyError):
    """Why a demo command could not start, in one line for stderr."""


def check_tasks(path: Path) -> None:
    """The task set loads for the demo backend and for the grader, or :class:`DemoStartError`
    naming file and line."""
    from grader.loader import load_tasks

    try:
        load_demo_tasks(path)
        load_tasks(path)
    except (TaskLoadError, ValueError, OSError) as exc:
        raise DemoStartError(f"--tasks: {exc}") from None


def hold_port(host: str, port: int, flag: str) -> list[socket.socket]:
    """Listening sockets on ``host:port``; :class:`DemoStartError` naming the flag."""
    if not 0 <= port <= 65535:
        raise DemoStartError(f"{flag}: must be 0..65535 (got {port})")
    try:
        return hold(host, port)
    except ListenError as exc:
        raise DemoStartError(f"{flag}: {exc}") from None


class ResultsClaim:
    """An exclusive lock on the demo's results file for as long as the demo runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise DemoStartError(f"--results: {where}{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise DemoStartError(
                f"--results: {path} is in use by another gradeproxy demo; "
                "stop it or give this one --results of its own"
            ) from None

    def start_fresh(self) -> None:
        """Empty the file: this run's rows only (the claim is held, so no one else writes)."""
        os.ftruncate(self._fd, 0)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def fail(name: str, exc: BaseException | str) -> int:
    print(f"gradeproxy {name}: {exc}", file=sys.stderr, flush=True)
    return 1


def stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> Callable[[], None]:
    """SIGINT/SIGTERM set ``stop``; a second exits at once with 130 (as ``serve``). Returns the
    function that removes the handlers."""

    def interrupt() -> None:
        if stop.is_set():
            os._exit(130)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)

    def remove() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    return remove


async def serve_backend(app: web.Application, host: str, port: int, tasks: Path) -> None:
    """``gradeproxy demo-backend``: hold the port, serve until SIGINT/SIGTERM."""
    sockets = hold_port(host, port, "--port")
    stop = asyncio.Event()
    remove = stop_on_signals(asyncio.get_running_loop(), stop)
    runner = web.AppRunner(app, handle_signals=False)
    try:
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        where = f"http://{host}:{held_port(sockets)}/v1"
        print(f"demo backend on {where} (tasks: {tasks}; Ctrl-C to stop)", flush=True)
        await stop.wait()
    finally:
        remove()
        await runner.cleanup()
