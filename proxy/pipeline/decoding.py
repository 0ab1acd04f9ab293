"""A bounded decoded copy of a compressed response, for capture only.

The proxy relays an upstream's body exactly as it was sent, ``Content-Encoding`` included, so
the client decodes it, never the proxy. Grading needs the decoded text, though: this decodes a
*copy*, incrementally, and stops at ``limit`` decoded bytes. A decompression bomb (a 204 KB gzip
body that inflates to 200 MB) therefore costs at most ``limit`` bytes of memory and the CPU to
inflate them; what is cut off is simply not graded (the capture reports the cut).

Only the encodings the standard library decodes are supported (gzip, x-gzip, deflate). Any
other coding (br, zstd, a chain) is relayed untouched and its copy is left as it came, so the
capture fails to parse it and says so in the row, instead of grading bytes it cannot read.

One relay does decode what it sends: a compressed stream an acting enforce policy covers is
judged as text and sent uncompressed (docs/enforce.md), through :class:`StreamDecoder`, which
inflates each read in bounded pieces so one read never materialises a bomb whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator

__all__ = ["CaptureBuffer", "StreamDecoder", "content_coding", "decodable"]

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# The most decoded bytes :meth:`StreamDecoder.pieces` hands over at once.
PIECE_MAX_BYTES = 1024 * 1024


def content_coding(values: Iterable[str]) -> str:
    """The coding a client decodes a body by, from *every* ``Content-Encoding`` header, lower
    case: ``identity`` (none), one coding, or a chain (``"gzip, br"``).

    Clients (httpx, which the openai SDK uses) join repeated headers and comma-separated
    values in order and skip ``identity`` and empty tokens; reading only the first header
    would take ``identity`` followed by ``gzip`` for an uncompressed body, and judge bytes
    the client then inflates into something else (docs/enforce.md, Compressed answers)."""
    tokens = (token.strip().lower() for value in values for token in value.split(","))
    return ", ".join(t for t in tokens if t and t != "identity") or "identity"


def decodable(coding: str) -> bool:
    """Whether the proxy can decode a body sent with this ``Content-Encoding`` (lower-cased)."""
    return coding in _WBITS


class CaptureBuffer:
    """Collects the capture copy of one response, decoded and capped at ``limit`` bytes.

    ``parts`` are the decoded pieces in order; ``truncated`` says the cap cut the copy (or
    the encoded body could not be decoded, in which case ``error`` says why).
    """

    __slots__ = ("_decoder", "_deflate", "error", "limit", "parts", "size", "truncated")

    def __init__(self, content_encoding: str | None, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.error: str | None = None
        coding = (content_encoding or "").strip().lower()
        self._deflate = coding == "deflate"
        wbits = _WBITS.get(coding)
        self._decoder = zlib.decompressobj(wbits) if wbits is not None else None

    def add(self, chunk: bytes) -> None:
        """Take the next relayed bytes (encoded as the upstream sent them)."""
        if self.truncated or not chunk:
            return
        if self._decoder is None:
            self._keep(chunk)
            return
        try:
            # max_length bounds what one call may inflate: the bomb never materialises.
            data = self._decoder.decompress(chunk, self.limit - self.size + 1)
        except zlib.error as exc:
            if self._deflate and self.size == 0 and not self.parts:
                # "deflate" is often sent raw (no zlib header), as browsers also accept.
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                self._deflate = False
                self.add(chunk)
                return
            self.error = f"cannot decode the response body: {exc}"
            self.truncated = True
            return
        self._keep(data)
        if self._decoder.unconsumed_tail and not self.truncated:
            self.truncated = True  # more output was waiting: over the limit

    def _keep(self, data: bytes) -> None:
        room = self.limit - self.size
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        if data:
            self.parts.append(data)
            self.size += len(data)


class StreamDecoder:
    """Decodes a relayed body read by read, for a relay that sends it decoded.

    ``deflate`` is tried as zlib first, then raw (as :class:`CaptureBuffer` does). A body that
    cannot be decoded raises :class:`zlib.error`: the caller has sent identity headers, so the
    rest cannot be relayed as it came either.
    """

    __slots__ = ("_decoder", "_deflate", "_started")

    def __init__(self, coding: str) -> None:
        wbits = _WBITS.get(coding)
        if wbits is None:
            raise ValueError(f"cannot decode {coding!r}")
        self._deflate = coding == "deflate"
        self._started = False
        self._decoder = zlib.decompressobj(wbits)

    def pieces(self, chunk: bytes) -> Iterator[bytes]:
        """The decoded text of ``chunk``, at most :data:`PIECE_MAX_BYTES` a piece; each is
        inflated only once the previous one was taken."""
        data = chunk
        while True:
            try:
                piece = self._decoder.decompress(data, PIECE_MAX_BYTES)
            except zlib.error:
                if not self._deflate or self._started:
                    raise
                self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
                self._deflate = False
                continue
            self._started = True
            data = self._decoder.unconsumed_tail
            if piece:
                yield piece
            if not data and len(piece) < PIECE_MAX_BYTES:  # a full piece may have more behind
                return

    def flush(self) -> bytes:
        """At the end of the body: whatever the decoder still holds."""
        return self._decoder.flush()
