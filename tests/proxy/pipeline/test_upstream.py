"""The upstream client (proxy/pipeline/upstream/) against a raw socket server on loopback
that answers with exact bytes: framing, keep-alive reuse, the request head as sent, failures
mapped to the proxy's upstream errors, flow control, idle timeouts by one scan, and TLS."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from multidict import CIMultiDict

from proxy.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from proxy.pipeline.upstream import POOL, READ_HIGH, Origin, Timeouts, UpstreamPool
from tests.support.backend import ScriptedBackend
from tests.support.proxy import ProxyFactory, held_streams

T = Timeouts(connect_s=5, idle_s=5)
Answer = Callable[[bytes], bytes]  # the request's head and body -> the bytes sent back


@dataclass
class RawServer:
    """Answers each request on a connection with ``answer(request)``; closes when told."""

    answer: Answer
    close_after: bool = False
    piece: int = 0  # write the answer in pieces of this size, one loop turn apart
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                step = self.piece or len(answer) or 1
                for start in range(0, len(answer), step):
                    writer.write(answer[start : start + step])
                    await writer.drain()
                    if self.piece:
                        await asyncio.sleep(0.001)
                if not answer:
                    await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    @property
    def origin(self) -> Origin:
        return Origin.of(f"http://127.0.0.1:{self.port}/v1")


@asynccontextmanager
async def serving(
    answer: Answer, close_after: bool = False, piece: int = 0
) -> AsyncIterator[tuple[RawServer, UpstreamPool]]:
    raw = RawServer(answer, close_after, piece)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    raw.port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(shortest_idle_s=60)
    try:
        yield raw, pool
    finally:
        pool.close()
        await closed(server, raw.writers)


async def closed(server: asyncio.Server, writers: list[asyncio.StreamWriter]) -> None:
    server.close()
    for writer in writers:
        writer.close()
    await server.wait_closed()
    await asyncio.sleep(0.01)  # the transports' close callbacks run


async def holding(
    writers: list[asyncio.StreamWriter],
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A connection handler that answers nothing and ends when the client closes."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read()
        writer.close()

    return hold


def fixed(data: bytes) -> Answer:
    return lambda _request: data


async def fetch(pool: UpstreamPool, origin: Origin, method: str = "POST") -> tuple[int, bytes]:
    response = await pool.request(method, origin, "/v1/x", CIMultiDict(), b"{}", T)
    try:
        return response.status, await response.read()
    finally:
        response.close()


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    ("method", "answer", "status", "body", "reused"),
    [
        pytest.param(
            "POST",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            200,
            b"hello",
            True,
            id="content_length",
        ),
        pytest.param("POST", CHUNKED, 200, b"abcde", True, id="chunked"),
        pytest.param(
            "POST", CHUNKED[:-2] + b"X-T: 1\r\n\r\n", 200, b"abcde", True, id="chunked_with_trailer"
        ),
        pytest.param(
            "POST",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
            201,
            b"ok",
            True,
            id="informational_first",
        ),
        pytest.param(
            "HEAD",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
            200,
            b"",
            True,
            id="head_has_no_body",
        ),
        pytest.param("POST", b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", True, id="no_content"),
        pytest.param(
            "GET",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n",
            304,
            b"",
            True,
            id="not_modified",
        ),
        pytest.param(
            "POST",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
            200,
            b"ok",
            False,
            id="connection_close",
        ),
        pytest.param(
            "POST",
            b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
            200,
            b"ok",
            False,
            id="http_1_0",
        ),
    ],
)
async def test_a_response_is_read_as_framed_and_its_connection_reused_when_it_may_be(
    method: str, answer: bytes, status: int, body: bytes, reused: bool
) -> None:
    async with serving(fixed(answer)) as (raw, pool):
        assert await fetch(pool, raw.origin, method) == (status, body)
        assert await fetch(pool, raw.origin, method) == (status, body)
        assert raw.connections == (1 if reused else 2)


async def test_a_body_delimited_by_the_close_is_read_to_the_end() -> None:
    answer = fixed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
    async with serving(answer, close_after=True) as (raw, pool):
        assert await fetch(pool, raw.origin) == (200, b"until the end")
        assert await fetch(pool, raw.origin) == (200, b"until the end")
        assert raw.connections == 2


OBS = b"caf\xe9".decode("utf-8", "surrogateescape")  # obs-text, as aiohttp's server decodes it


@pytest.mark.parametrize(
    ("method", "headers", "body", "lines"),
    [
        pytest.param(
            "POST",
            [("Content-Type", "application/json")],
            b'{"a":1}',
            [b"Content-Type: application/json", b"Content-Length: 7"],
            id="post",
        ),
        pytest.param("GET", [], b"", [], id="get_no_length"),
        pytest.param("POST", [], b"", [b"Content-Length: 0"], id="empty_post_length_0"),
        pytest.param(
            "POST",
            [("X-A", "1"), ("x-a", "2")],
            b"",
            [b"X-A: 1", b"x-a: 2", b"Content-Length: 0"],
            id="repeated_in_order",
        ),
        pytest.param(
            "POST", [("X-Obs", OBS)], b"", [b"X-Obs: caf\xe9", b"Content-Length: 0"], id="obs_text"
        ),
    ],
)
async def test_the_request_goes_as_given_with_only_host_and_length_added(
    method: str, headers: list[tuple[str, str]], body: bytes, lines: list[bytes]
) -> None:
    async with serving(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) as (raw, pool):
        response = await pool.request(method, raw.origin, "/v1/x", CIMultiDict(headers), body, T)
        response.close()
        first = [f"{method} /v1/x HTTP/1.1".encode(), f"Host: 127.0.0.1:{raw.port}".encode()]
        assert raw.requests == [b"\r\n".join([*first, *lines, b"", body])]


@pytest.mark.parametrize(
    ("base", "host_header"),
    [
        pytest.param("http://example.test/v1", "example.test", id="default_port_left_out"),
        pytest.param("https://example.test:443/v1", "example.test", id="https_default_port"),
        pytest.param("http://example.test:8080/v1/", "example.test:8080", id="explicit_port"),
        pytest.param("http://[::1]:9/v1", "[::1]:9", id="ipv6_in_brackets"),
    ],
)
def test_an_origin_names_the_host_as_http_does(base: str, host_header: str) -> None:
    origin = Origin.of(base)
    assert origin.host_header == host_header
    assert origin.base_path == "/v1"


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb"], ids=["crlf", "lf", "cr"])
async def test_a_header_with_a_line_break_is_refused_and_nothing_is_sent(value: str) -> None:
    async with serving(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) as (raw, pool):
        with pytest.raises(UpstreamProtocolError, match="line break"):
            await pool.request(
                "POST", raw.origin, "/v1/x", CIMultiDict(Authorization=value), b"", T
            )
        assert raw.connections == 0


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        pytest.param(
            b"", UpstreamProtocolError, "closed the connection", id="closed_before_headers"
        ),
        pytest.param(
            b"NOT HTTP\r\n\r\n", UpstreamProtocolError, "malformed response", id="malformed"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
            UpstreamProtocolError,
            "closed the connection",
            id="short_body",
        ),
        pytest.param(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
            UpstreamProtocolError,
            "switched protocols",
            id="upgrade",
        ),
    ],
)
async def test_a_broken_exchange_is_an_upstream_protocol_error(
    answer: bytes, error: type[UpstreamError], message: str
) -> None:
    async with serving(fixed(answer), close_after=True) as (raw, pool):
        with pytest.raises(error, match=message):
            await fetch(pool, raw.origin)


async def test_bytes_received_before_a_break_are_delivered_first() -> None:
    answer = fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    async with serving(answer, close_after=True) as (raw, pool):
        response = await pool.request("POST", raw.origin, "/v1/x", CIMultiDict(), b"", T)
        assert await response.chunk() == b"abc"
        with pytest.raises(UpstreamProtocolError):
            await response.chunk()
        response.close()


async def test_a_refused_connection_is_unreachable() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    pool = UpstreamPool(60)
    with pytest.raises(UpstreamUnreachableError, match="cannot connect to the upstream"):
        await pool.request(
            "GET", Origin.of(f"http://127.0.0.1:{port}/v1"), "/v1", CIMultiDict(), b"", T
        )


async def test_a_silent_upstream_times_out_by_the_scan() -> None:
    writers: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(await holding(writers), "127.0.0.1", 0)
    origin = Origin.of(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    pool = UpstreamPool(shortest_idle_s=0.2)
    scan = asyncio.create_task(pool.run())
    try:
        with pytest.raises(UpstreamTimeoutError, match=r"sent nothing for 0\.2 s"):
            await pool.request("GET", origin, "/v1", CIMultiDict(), b"", Timeouts(5, 0.2))
        assert pool.reading == set()
    finally:
        scan.cancel()
        await closed(server, writers)


@pytest.mark.parametrize(
    ("ages", "late"),
    [
        pytest.param([1.0, 2.0], [False, False], id="none_late"),
        pytest.param([-0.5, 2.0], [True, False], id="one_late"),
        pytest.param([-1.0, 0.0], [True, True], id="deadline_reached_is_late"),
    ],
)
async def test_the_scan_fails_exactly_the_reads_past_their_deadline(
    ages: list[float], late: list[bool]
) -> None:
    writers: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(await holding(writers), "127.0.0.1", 0)
    origin = Origin.of(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    pool = UpstreamPool(shortest_idle_s=60)
    requests = [
        asyncio.create_task(pool.request("GET", origin, "/v1", CIMultiDict(), b"", T)) for _ in ages
    ]
    for _ in range(200):  # each request sent and waiting on its upstream
        if len(pool.reading) == len(ages):
            break
        await asyncio.sleep(0.01)
    now = pool.loop.time()
    conns = list(pool.reading)
    for conn, age in zip(conns, ages, strict=True):
        conn.idle_deadline = now + age
    assert pool.scan(now) == sum(late)
    for conn, expected in zip(conns, late, strict=True):
        assert (conn in pool.reading) == (not expected)
        assert isinstance(conn.failure, UpstreamTimeoutError) == expected
    _, pending = await asyncio.wait(requests, timeout=1.0)
    assert len(pending) == len(ages) - sum(late)  # the late ones ended: their request raised
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*requests, return_exceptions=True)
    assert sum(isinstance(r, UpstreamTimeoutError) for r in results) == sum(late)
    pool.close()
    await closed(server, writers)


async def test_idle_connections_close_after_the_keepalive() -> None:
    async with serving(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) as (raw, pool):
        await fetch(pool, raw.origin)
        pool.scan(pool.loop.time() + pool.keepalive_s + 1)
        await fetch(pool, raw.origin)
        assert raw.connections == 2


async def test_a_slow_reader_pauses_the_upstream_and_loses_nothing() -> None:
    body = bytes(range(256)) * (16 * 1024)  # 4 MiB
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with serving(fixed(head + body)) as (raw, pool):
        response = await pool.request("POST", raw.origin, "/v1/x", CIMultiDict(), b"", T)
        await asyncio.sleep(0.3)  # the upstream writes as fast as it may meanwhile
        conn = response._conn
        assert conn.paused
        assert conn.buffered <= READ_HIGH + 256 * 1024  # one socket read past the mark at most
        received = bytearray()
        while chunk := await response.chunk():
            received += chunk
        response.close()
        assert bytes(received) == body


async def test_a_large_request_body_arrives_whole() -> None:
    body = b"x" * (3 * 1024 * 1024 + 7)
    async with serving(fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) as (raw, pool):
        response = await pool.request("POST", raw.origin, "/v1/x", CIMultiDict(), body, T)
        response.close()
        assert raw.requests[0].endswith(b"\r\n\r\n" + body)


@pytest.mark.parametrize("held", [1, 2], ids=["one_stream", "two_streams"])
async def test_reads_in_progress_through_the_proxy_are_watched_then_dropped(
    make_proxy: ProxyFactory, backend: ScriptedBackend, held: int
) -> None:
    client = await make_proxy()
    responses, gate = await held_streams(client, backend, held)
    pool = client.app[POOL]
    waiting = set(pool.reading)
    gate.set()
    for response in responses:
        assert await response.read()
    assert len(waiting) == held
    assert pool.reading == set()  # a finished response leaves nothing to time out


def _certificate(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted_ca", "unknown_ca"])
async def test_https_upstreams_are_verified(tmp_path: Path, trusted: bool) -> None:
    cert, key = _certificate(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    raw = RawServer(fixed(CHUNKED))
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=str(cert)) if trusted else None
    pool = UpstreamPool(60, tls=client or ssl.create_default_context())
    origin = Origin(host="localhost", port=port, tls=True, host_header="localhost", base_path="/v1")
    try:
        if trusted:
            assert await fetch(pool, origin) == (200, b"abcde")
            assert await fetch(pool, origin) == (200, b"abcde")
            assert raw.connections == 1
        else:
            with pytest.raises(UpstreamUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
                await fetch(pool, origin)
    finally:
        pool.close()
        await closed(server, raw.writers)


async def test_a_sized_body_read_whole_is_never_paused() -> None:
    body = b"y" * (4 * 1024 * 1024)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with serving(fixed(head + body)) as (raw, pool):
        response = await pool.request(
            "POST", raw.origin, "/v1/x", CIMultiDict(), b"", Timeouts(5, 2)
        )
        try:
            assert await response.read() == body
        finally:
            response.close()


@pytest.mark.parametrize(
    ("extra", "piece", "refused"),
    [
        pytest.param(60 * 1024, 0, False, id="60_KiB_of_headers"),
        pytest.param(60 * 1024, 1024, False, id="60_KiB_trickled"),
        pytest.param(70 * 1024, 0, True, id="70_KiB_of_headers"),
        pytest.param(70 * 1024, 1024, True, id="70_KiB_trickled_in_one_header"),
        pytest.param(70 * 1024, 1024, None, id="a_header_that_never_ends"),
    ],
)
async def test_a_response_head_is_bounded(extra: int, piece: int, refused: bool | None) -> None:
    """``None``: the head never ends; refused at the limit, not at the idle timeout."""
    answer = b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * extra
    if refused is not None:
        answer += b"\r\nContent-Length: 2\r\n\r\nok"
    async with serving(fixed(answer), piece=piece) as (raw, pool):
        if refused is not False:
            with pytest.raises(UpstreamProtocolError, match="exceeds 64 KiB"):
                await fetch(pool, raw.origin)
        else:
            assert await fetch(pool, raw.origin) == (200, b"ok")


@pytest.mark.parametrize(
    ("method", "retried"),
    [
        pytest.param("GET", True, id="get_sent_again"),
        pytest.param("DELETE", True, id="delete_sent_again"),
        pytest.param("POST", False, id="post_never_sent_twice"),
    ],
)
async def test_a_reused_connection_closed_before_any_answer(method: str, retried: bool) -> None:
    """The upstream closes a kept-alive connection just as the next request reaches it."""
    served: list[int] = []
    writers: list[asyncio.StreamWriter] = []

    async def once_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        if len(served) == 0 or len(writers) > 1:  # the first request, or a new connection
            served.append(len(writers))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                await reader.readuntil(b"\r\n\r\n")  # the next request: closed unanswered
        writer.close()

    server = await asyncio.start_server(once_per_connection, "127.0.0.1", 0)
    origin = Origin.of(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    pool = UpstreamPool(60)
    try:
        assert await fetch(pool, origin, method) == (200, b"ok")
        if retried:
            assert await fetch(pool, origin, method) == (200, b"ok")
            assert served == [1, 2]
        else:
            with pytest.raises(UpstreamProtocolError, match="closed the connection"):
                await fetch(pool, origin, method)
            assert served == [1]
    finally:
        pool.close()
        await closed(server, writers)


def test_the_client_runs_on_uvloop() -> None:
    """`serve` takes uvloop when installed; its transports are not asyncio.Transport's
    subclasses, and pausing and resuming reads must work on them too."""
    uvloop = pytest.importorskip("uvloop")
    body = bytes(range(256)) * (8 * 1024)  # 2 MiB: past the pause mark

    async def scenario() -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        async with serving(fixed(head + body)) as (raw, pool):
            for _ in range(2):
                response = await pool.request("POST", raw.origin, "/v1/x", CIMultiDict(), b"", T)
                await asyncio.sleep(0.1)
                assert response._conn.paused
                received = bytearray()
                while chunk := await response.chunk():
                    received += chunk
                response.close()
                assert bytes(received) == body
            assert raw.connections == 1

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
