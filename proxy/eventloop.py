"""The event loop ``serve`` runs on: asyncio's own, or uvloop's when it is installed or asked.

uvloop (the ``gradeproxy[uvloop]`` extra) is libuv under the asyncio API: the same code, a
faster loop, measured on and off by bench/perf.py. ``auto`` takes it when it imports and
asyncio's loop otherwise, so installing the extra is the whole opt-in; ``uvloop`` insists (a
missing install fails start-up in one line rather than running slower than asked); ``asyncio``
never takes it (to compare, or to rule it out).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Literal, get_args

from proxy.errors import ProxyError

EventLoop = Literal["auto", "asyncio", "uvloop"]
CHOICES: tuple[str, ...] = get_args(EventLoop)

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class EventLoopError(ProxyError):
    """The loop asked for cannot be had (uvloop asked for, not installed)."""


def loop_factory(choice: EventLoop) -> LoopFactory | None:
    """The factory for ``asyncio.Runner(loop_factory=...)``: None means asyncio's own loop."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise EventLoopError(
                "server.event_loop is uvloop but uvloop is not installed: "
                "pip install 'gradeproxy[uvloop]' (or use auto or asyncio)"
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop runs (for the start-up log line)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
