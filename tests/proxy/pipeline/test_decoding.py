"""Content codings pass through untouched; grading reads a decoded copy capped at
``limits.max_capture_bytes``, so a decompression bomb is relayed as sent and never inflated."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from pathlib import Path

import pytest

from proxy.pipeline.decoding import (
    PIECE_MAX_BYTES,
    CaptureBuffer,
    StreamDecoder,
    content_coding,
)
from tests.support.backend import JSON, SSE, Reply, ScriptedBackend, wire
from tests.support.proxy import ProxyFactory, rows_of


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        pytest.param(None, None, id="none_sent_none_added"),
        pytest.param("gzip", "gzip", id="gzip"),
        pytest.param("br;q=1.0, identity;q=0.5", "br;q=1.0, identity;q=0.5", id="kept_verbatim"),
        pytest.param("identity", "identity", id="identity"),
    ],
)
async def test_accept_encoding_is_the_clients_own(
    make_proxy: ProxyFactory, backend: ScriptedBackend, sent: str | None, forwarded: str | None
) -> None:
    client = await make_proxy()
    headers = {"Accept-Encoding": sent} if sent else {}
    await client.post(
        "/v1/chat/completions", data=b"{}", headers=headers, skip_auto_headers=["Accept-Encoding"]
    )
    assert backend.seen[-1].headers.get("Accept-Encoding") == forwarded


@pytest.mark.parametrize(
    ("encoding", "encode", "stream"),
    [
        pytest.param("gzip", gzip.compress, False, id="gzip_json"),
        pytest.param("deflate", zlib.compress, False, id="zlib_deflate_json"),
        pytest.param("deflate", _raw_deflate, False, id="raw_deflate_json"),
        pytest.param("gzip", gzip.compress, True, id="gzip_sse"),
    ],
)
async def test_encoded_answers_are_relayed_encoded_and_graded_decoded(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    encoding: str,
    encode: object,
    stream: bool,
) -> None:
    assert callable(encode)
    plain = wire("openai_single_tool.sse" if stream else "openai_single_tool.json")
    encoded = encode(plain)
    backend.replies.append(
        Reply(
            body=encoded,
            content_type=SSE if stream else JSON,
            headers={"Content-Encoding": encoding},
            split_at=range(7, len(encoded), 7),
        )
    )
    client = await make_proxy()
    response = await client.post(
        "/v1/chat/completions",
        data=b"{}",
        headers={"X-Grade-Task": "weather.single", "Accept-Encoding": encoding},
        auto_decompress=False,
    )
    assert response.headers["Content-Encoding"] == encoding
    assert await response.read() == encoded
    [row] = await rows_of(client, results_path)
    assert (row["task_id"], row["result"]) == ("weather.single", "pass")


@pytest.mark.parametrize("chunked", [False, True], ids=["sized", "chunked"])
async def test_decompression_bomb_is_relayed_as_sent_and_cut_for_grading(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, chunked: bool
) -> None:
    """64 MiB of zeros in ~64 KB of gzip: the client gets the 64 KB; the capture stops at 1 MiB
    and the response is skipped as ``capture_limit``, not graded from a partial copy nor
    counted as a grading error (issue 39)."""
    bomb = gzip.compress(b'{"choices":[{"message":{"content":"' + b"0" * (64 * 1024 * 1024))
    backend.replies.append(Reply(body=bomb, headers={"Content-Encoding": "gzip"}, chunked=chunked))
    client = await make_proxy(limits={"max_capture_bytes": 1024 * 1024})
    response = await client.post(
        "/v1/chat/completions",
        data=b"{}",
        headers={"X-Grade-Task": "weather.single", "Accept-Encoding": "gzip"},
        auto_decompress=False,
    )
    assert await response.read() == bomb
    assert await rows_of(client, results_path) == []
    metrics = await (await client.get("/metrics")).text()
    assert 'gradeproxy_grading_skipped_total{reason="capture_limit"} 1.0' in metrics
    assert 'gradeproxy_grading_errors_total{kind="capture"} 0.0' in metrics


@pytest.mark.parametrize(
    ("encoding", "body", "limit", "decoded", "truncated"),
    [
        pytest.param(None, b"abc", 10, b"abc", False, id="identity"),
        pytest.param(None, b"abcdef", 4, b"abcd", True, id="identity_cut"),
        pytest.param("gzip", gzip.compress(b"hello"), 10, b"hello", False, id="gzip"),
        pytest.param("GZip", gzip.compress(b"hello"), 10, b"hello", False, id="case_insensitive"),
        pytest.param("x-gzip", gzip.compress(b"hello"), 10, b"hello", False, id="x_gzip"),
        pytest.param("gzip", gzip.compress(b"z" * 5000), 1024, b"z" * 1024, True, id="gzip_cut"),
        pytest.param("deflate", zlib.compress(b"hey"), 10, b"hey", False, id="zlib"),
        pytest.param("deflate", _raw_deflate(b"hey"), 10, b"hey", False, id="raw_deflate"),
        pytest.param("br", b"\x0b\x02\x80hey\x03", 10, b"\x0b\x02\x80hey\x03", False, id="br_kept"),
        pytest.param("gzip", b"not gzip at all", 10, b"", True, id="corrupt_gzip"),
    ],
)
def test_capture_buffer(
    encoding: str | None, body: bytes, limit: int, decoded: bytes, truncated: bool
) -> None:
    copy = CaptureBuffer(encoding, limit)
    for start in range(0, len(body), 3):
        copy.add(body[start : start + 3])
    assert (b"".join(copy.parts), copy.truncated) == (decoded, truncated)
    assert copy.size <= limit


async def test_decompression_bomb_never_inflates_in_memory(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """The issue's bomb (a gzip body that inflates 1000-fold) through a graded request: the
    proxy's allocations peak far below the inflated size (a 64 MiB body, a 1 MiB capture cap)."""
    bomb = gzip.compress(b"[" + b"0," * (32 * 1024 * 1024) + b"0]")
    backend.replies.append(Reply(body=bomb, headers={"Content-Encoding": "gzip"}))
    client = await make_proxy(limits={"max_capture_bytes": 1024 * 1024})
    tracemalloc.start()
    try:
        response = await client.post(
            "/v1/chat/completions",
            data=b"{}",
            headers={"X-Grade-Task": "weather.single", "Accept-Encoding": "gzip"},
            auto_decompress=False,
        )
        assert await response.read() == bomb
        await rows_of(client, results_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a {len(bomb)} B body"


# A stream an acting enforce policy judges is decoded as it is relayed (docs/enforce.md).
STREAM = wire("openai_parallel_tools.sse")
BOMB = b"0," * (4 * PIECE_MAX_BYTES)  # 8 MiB of text, a few KiB compressed


@pytest.mark.parametrize(
    ("coding", "body", "text", "read"),
    [
        pytest.param("gzip", gzip.compress(STREAM), STREAM, 3, id="gzip"),
        pytest.param("x-gzip", gzip.compress(STREAM), STREAM, 3, id="x_gzip"),
        pytest.param("deflate", zlib.compress(STREAM), STREAM, 3, id="zlib"),
        pytest.param("deflate", _raw_deflate(STREAM), STREAM, 3, id="raw_deflate"),
        pytest.param("deflate", _raw_deflate(STREAM), STREAM, 10_000, id="raw_deflate_whole"),
        pytest.param("gzip", gzip.compress(BOMB), BOMB, 10_000_000, id="bomb_in_one_read"),
    ],
)
def test_stream_decoder_gives_the_text_back_in_bounded_pieces(
    coding: str, body: bytes, text: bytes, read: int
) -> None:
    decoder = StreamDecoder(coding)
    pieces = [
        piece
        for start in range(0, len(body), read)
        for piece in decoder.pieces(body[start : start + read])
    ]
    assert b"".join(pieces) + decoder.flush() == text
    assert max(len(piece) for piece in pieces) <= PIECE_MAX_BYTES


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        pytest.param("gzip", b"not gzip at all", id="not_gzip"),
        pytest.param("deflate", zlib.compress(STREAM)[:40] + b"\xff" * 40, id="zlib_then_junk"),
    ],
)
def test_stream_decoder_raises_on_what_it_cannot_decode(coding: str, body: bytes) -> None:
    decoder = StreamDecoder(coding)
    with pytest.raises(zlib.error):
        list(decoder.pieces(body))


@pytest.mark.parametrize(
    ("values", "coding"),
    [
        pytest.param([], "identity", id="none"),
        pytest.param(["GZip "], "gzip", id="one"),
        pytest.param(["identity", "gzip"], "gzip", id="identity-then-gzip"),
        pytest.param(["", "gzip"], "gzip", id="empty-then-gzip"),
        pytest.param(["identity, gzip"], "gzip", id="listed"),
        pytest.param(["gzip", "br"], "gzip, br", id="a-chain"),
        pytest.param(["identity", " "], "identity", id="identity-and-blank"),
    ],
)
def test_content_coding_reads_every_header_as_a_client_does(values: list[str], coding: str) -> None:
    assert content_coding(values) == coding
