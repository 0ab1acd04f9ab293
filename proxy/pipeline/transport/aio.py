"""The ``aiohttp`` transport: the same seam on aiohttp's ``ClientSession``.

For what the fast client does not do: a forward proxy (``HTTP(S)_PROXY``/``NO_PROXY`` through
aiohttp's ``trust_env``, ``CONNECT`` for https upstreams), and a client maintained by others
to fall back on. It costs more CPU per request (docs/performance.md), which is why it is not
the default.

Kept byte-transparent as the fast client is: no ``User-Agent``, ``Accept``,
``Accept-Encoding`` or ``Content-Type`` of its own (``skip_auto_headers``), no decompression,
no cookies, no redirects followed. aiohttp's errors become the proxy's upstream errors, so a
502, a 504 and an in-band error read the same whichever client carried the request.
"""

from __future__ import annotations

import io
import ssl
from typing import Final

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from proxy.pipeline.upstream import KEEPALIVE_S, Origin, Timeouts

__all__ = ["AiohttpTransport"]

# What aiohttp would add to a request on its own; the relay sends the client's headers only.
_NO_AUTO_HEADERS: Final = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# aiohttp writes a bytes body in one piece and warns past 1 MiB; a BytesIO goes in slices,
# yielding to the loop between them (same bytes, same Content-Length).
_SLICED_BODY: Final = 1024 * 1024


class AiohttpTransport:
    """Requests through one ``ClientSession``: ``tls`` for https origins (None: the system's
    CAs), ``trust_env`` for a forward proxy from the environment, ``max_per_origin``
    connections to one origin at most (aiohttp's ``limit_per_host``; 0: no cap)."""

    def __init__(
        self, tls: ssl.SSLContext | None = None, trust_env: bool = False, max_per_origin: int = 0
    ) -> None:
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=max_per_origin,
            keepalive_timeout=KEEPALIVE_S,
            ssl=tls if tls is not None else True,
        )
        self.trust_env = trust_env
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=trust_env,
            auto_decompress=False,  # the relay forwards encoded bodies; capture decodes a copy
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NO_AUTO_HEADERS,
        )

    async def request(
        self,
        method: str,
        origin: Origin,
        path: str,
        headers: CIMultiDict[str],
        body: bytes,
        timeouts: Timeouts,
    ) -> AiohttpReply:
        scheme = "https" if origin.tls else "http"
        url = URL(f"{scheme}://{origin.host_header}{path}", encoded=True)
        # connect: the wait for a pooled connection plus opening one (through the proxy, if
        # any); sock_read: each wait for the upstream, as the fast client's idle timeout.
        timeout = aiohttp.ClientTimeout(
            total=None, connect=timeouts.connect_s or None, sock_read=timeouts.idle_s or None
        )
        try:
            response = await self.session.request(
                method,
                url,
                headers=headers,
                data=io.BytesIO(body) if len(body) > _SLICED_BODY else body or None,
                allow_redirects=False,
                timeout=timeout,
            )
        except aiohttp.ClientError as exc:
            raise _upstream_error(exc, timeouts, before_response=True) from None
        except TimeoutError:
            raise UpstreamTimeoutError(
                f"the upstream sent nothing for {timeouts.idle_s:g} s"
            ) from None
        return AiohttpReply(response, timeouts)

    async def aclose(self) -> None:
        await self.session.close()


class AiohttpReply:
    """An aiohttp response behind the seam's :class:`~proxy.pipeline.transport.base.Reply`."""

    __slots__ = ("_done", "_response", "_timeouts", "content_length", "content_type")

    def __init__(self, response: aiohttp.ClientResponse, timeouts: Timeouts) -> None:
        self._response = response
        self._timeouts = timeouts
        self._done = False
        # Read off the headers as the fast client does (aiohttp's own properties differ on
        # malformed values), so both transports take the same relay path for one response.
        kind = response.headers.get("Content-Type")
        media = kind.split(";", 1)[0].strip().lower() if kind else ""
        self.content_type = media or "application/octet-stream"
        length = response.headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        return self._response.headers

    @property
    def raw_values(self) -> bool:
        # aiohttp's client hands header values over decoded; bytes that are not UTF-8 are relayed
        # as it decoded them (only the fast client relays them byte for byte).
        return False

    async def read(self) -> bytes:
        try:
            data = await self._response.read()
        except aiohttp.ClientError as exc:
            raise _upstream_error(exc, self._timeouts) from None
        except TimeoutError:
            raise self._silent() from None
        self._done = True
        return data

    async def chunk(self) -> bytes:
        try:
            data = await self._response.content.readany()
        except aiohttp.ClientError as exc:
            raise _upstream_error(exc, self._timeouts) from None
        except TimeoutError:
            raise self._silent() from None
        if not data:
            self._done = True
        return data

    def close(self) -> None:
        # A whole body: the connection goes back to the pool; otherwise it is closed.
        if self._done:
            self._response.release()
        else:
            self._response.close()

    def _silent(self) -> UpstreamTimeoutError:
        return UpstreamTimeoutError(f"the upstream sent nothing for {self._timeouts.idle_s:g} s")


def _upstream_error(
    exc: aiohttp.ClientError, timeouts: Timeouts, before_response: bool = False
) -> UpstreamError:
    """aiohttp's failure as the proxy's: connect (502), timeout (504) or protocol (502)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamTimeoutError(f"cannot connect to the upstream in {timeouts.connect_s:g} s")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return UpstreamTimeoutError(f"the upstream sent nothing for {timeouts.idle_s:g} s")
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return UpstreamUnreachableError(
            f"the forward proxy refused the connection: {exc.status} {exc.message}"
        )
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientSSLError):
        return UpstreamUnreachableError(f"cannot connect to the upstream: {exc}")
    if before_response and isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamProtocolError("the upstream closed the connection")
    return UpstreamProtocolError(f"the upstream broke the exchange: {exc}")
