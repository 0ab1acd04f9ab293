"""A bounded decoded copy of a compressed response, for capture only.

The proxy relays an upstream's body exactly as it was sent, ``Content-Encoding`` included, so
the client decodes it, never the proxy. Grading needs the decoded text, though: this decodes a
*copy*, incrementally, and stops at ``limit`` decoded bytes. A decompression bomb (a 204 KB gzip
body that inflates to 200 MB) therefore costs at most ``limit`` bytes of memory and the CPU to
inflate them; what is cut off is simply not graded (the capture reports the cut).

Only the encodings the standard library decodes are supported (gzip, x-gzip, deflate). Any
other coding (br, zstd, a chain) is relayed untouched and its copy is left as it came, so the
capture fails to parse it and says so in the row, instead of grading bytes it cannot read.
"""

from __future__ import annotations

import zlib

__all__ = ["CaptureBuffer"]

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


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
