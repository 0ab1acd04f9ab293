"""The upstream client: pooled keep-alive HTTP/1.1 connections, no more than the relay needs.

Why not aiohttp's ``ClientSession``: the bare aiohttp relay spends about half of its CPU per
request in the client's layers (a ``ClientRequest`` and a ``ClientResponse`` built per request,
URL and cookie handling, trace hooks, a timer per read, a ``StreamReader``), measured by
``bench/upstream_bench.py``. Here a request is one formatted head and one ``transport.write``;
the response is parsed by llhttp (``httptools``, the parser uvicorn uses) straight into a list
of header pairs and a queue of body chunks, which the relay takes as they come.

What it keeps of aiohttp's behaviour, because the relay's semantics rest on it:

* **Idle timeouts** (``sock_read``): the upstream must send something at least every
  ``idle_s``, from the request sent to the last body byte, while the relay waits for it. A read
  notes a deadline; :meth:`UpstreamPool.scan`, run every ``tick``, fails the late ones (one
  periodic scan, not a timer per read), so a read times out between ``idle_s`` and
  ``idle_s + tick`` after the upstream last sent something. Each wait for the socket to take
  more of a large request body is bounded the same way (an upstream that stops reading).
* **Flow control**: at most ``READ_HIGH`` bytes are buffered before the socket stops being
  read; a slow client slows the upstream instead of growing memory.
* **Byte transparency**: headers go as the client sent them (plus ``Host`` and
  ``Content-Length``, nothing else: no ``Accept``, ``User-Agent`` or ``Accept-Encoding`` of its
  own), and the body comes back undecoded.
* **Framing**: Content-Length, chunked, close-delimited, HEAD and 1xx, all by llhttp.

A connection goes back to the pool only after a whole response on a keep-alive exchange; one
left mid-body (the client went away, a timeout, a cancelled handler) is closed. Idle
connections close after ``keepalive_s``. Failures are the proxy's upstream errors
(proxy/errors.py), so the relay maps them to a 502/504 before the response starts and to an
in-band error after.
"""

from aiohttp import web

from proxy.pipeline.upstream.connection import MAX_HEAD_BYTES, READ_HIGH, UpstreamResponse
from proxy.pipeline.upstream.pool import KEEPALIVE_S, Origin, Timeouts, UpstreamPool

__all__ = [
    "KEEPALIVE_S",
    "MAX_HEAD_BYTES",
    "POOL",
    "READ_HIGH",
    "Origin",
    "Timeouts",
    "UpstreamPool",
    "UpstreamResponse",
]

POOL = web.AppKey("upstream_pool", UpstreamPool)
