"""Hold the listening ports before anything else starts.

A start must never touch files (the results file above all) before it owns its ports: a second
``gradeproxy demo`` or ``serve`` on a port that is taken used to open, and the demo used to
empty, the running instance's results before it found out. So the sockets are bound and
listening first, as asyncio's ``create_server`` would bind them (every address the host
resolves to, ``SO_REUSEADDR``, IPv6 sockets IPv6-only), and the app is served on them later
(``web.SockSite``). Connections that arrive in between wait in the backlog.

This module binds sockets and nothing else: it never opens files or starts an app.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from proxy.errors import ProxyError

BACKLOG = 128  # aiohttp's default for its sites


class ListenError(ProxyError):
    """A port could not be held, in one line (``cannot listen on http://host:port: why``)."""


@dataclass(slots=True)
class Held:
    """Listening sockets, held until :meth:`close` or until a site takes them over."""

    traffic: list[socket.socket]
    admin: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        for sock in [*self.traffic, *self.admin]:
            sock.close()


def _where(host: str | None, port: int) -> str:
    return f"http://{host or '0.0.0.0'}:{port}"  # as aiohttp names a TCP site


def hold(host: str | None, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """Bind and listen on ``host:port`` (every address it resolves to); :class:`ListenError`
    when the port is taken or the host does not resolve, with nothing left open."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise ListenError(f"cannot listen on {_where(host, port)}: {exc.strerror or exc}") from None
    held: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            # Listening at once: two bound sockets with SO_REUSEADDR may share a port until
            # one of them listens, so a bind alone does not hold it.
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in held:
            sock.close()
        raise ListenError(f"cannot listen on {_where(host, port)}: {exc.strerror or exc}") from None
    return held


def held_port(sockets: list[socket.socket]) -> int:
    """The port the first socket holds (the one chosen for port 0)."""
    port: int = sockets[0].getsockname()[1]
    return port
