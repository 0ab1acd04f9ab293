"""The upstream transport seam: what the forward stage asks of an upstream client, and no more.

httpx's transport pattern: one small interface (a request in; status, headers and a body read
whole or as it arrives out), implemented by the proxy's own HTTP/1.1 client (``fast``) and by
aiohttp's ``ClientSession`` (``aiohttp``). The relay (proxy/pipeline/forward.py) and the
shadow runner see only these two protocols, so a route's choice of client changes nothing
they do. An implementation raises the proxy's upstream errors (proxy/errors.py) and nothing
else for a failed exchange, so a 502/504 before the response and an in-band error after it
mean the same whichever client carried the request.

It must never decode, re-frame or add to what passes: headers go as given (plus ``Host`` and
``Content-Length``), bodies come back undecoded.
"""

from __future__ import annotations

from typing import Protocol

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.pipeline.upstream import Origin, Timeouts

__all__ = ["Reply", "Transport"]


class Reply(Protocol):
    """A response whose headers are in; its body is read whole or chunk by chunk, and
    :meth:`close` ends the exchange (the connection is reused only after a whole body)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def content_type(self) -> str: ...  # the media type, lower case, without parameters

    @property
    def content_length(self) -> int | None: ...

    @property
    def raw_values(self) -> bool:
        """Some header value is not valid UTF-8: the relay writes the head itself, as sent."""
        ...

    async def read(self) -> bytes:
        """The whole body (the relay asks only for a sized one, within its buffering limit)."""
        ...

    async def chunk(self) -> bytes:
        """Everything received since the last call, waiting for something; ``b""`` at the end."""
        ...

    def close(self) -> None: ...


class Transport(Protocol):
    """Sends one request to an origin; returns once the response's headers are in."""

    async def request(
        self,
        method: str,
        origin: Origin,
        path: str,
        headers: CIMultiDict[str],
        body: bytes,
        timeouts: Timeouts,
    ) -> Reply: ...

    async def aclose(self) -> None:
        """Close every connection (at shutdown, after the relays ended)."""
        ...
