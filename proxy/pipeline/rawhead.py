"""Response heads written with the upstream's header bytes as it sent them.

Header values are ``str`` in aiohttp; the upstream client decodes them with surrogateescape
(proxy/pipeline/upstream/connection.py), so a value that is not valid UTF-8 (``caf\\xe9\\xff``)
holds lone surrogates. aiohttp's C header writer drops those characters silently, so the
client got ``caf``. The two response classes here write such a head themselves: the same
status line and headers aiohttp prepared, encoded with surrogateescape, so every byte the
upstream sent goes out unchanged. The relay uses them only for a response whose upstream head
held such a value (:attr:`UpstreamResponse.raw_values`); every other response takes aiohttp's
own path untouched.

This reaches into two of aiohttp's internals (the writer's buffered head and the response's
"send now" flag); where they are missing (another aiohttp), the head falls back to aiohttp's
writer, which is what happened before, and the relay test for these bytes fails loudly.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["RawHeadResponse", "RawHeadStreamResponse", "head_bytes"]


def head_bytes(status_line: str, headers: object) -> bytes:
    """The head as aiohttp writes it, each value's escaped bytes restored (CR/LF refused)."""
    items = headers.items()  # type: ignore[attr-defined]
    lines = [status_line, *(f"{name}: {value}" for name, value in items)]
    text = "\r\n".join(lines) + "\r\n\r\n"
    if text.count("\n") != len(lines) + 1 or text.count("\r") != len(lines) + 1:
        raise ValueError("a response header holds a line break")
    return text.encode("utf-8", "surrogateescape")


class _RawHead:
    """The override shared by both response classes (a mixin before aiohttp's class)."""

    async def _write_headers(self) -> None:
        request = self._req  # type: ignore[attr-defined]
        writer = self._payload_writer  # type: ignore[attr-defined]
        version = request.version
        status_line = f"HTTP/{version[0]}.{version[1]} {self._status} {self._reason}"  # type: ignore[attr-defined]
        headers = self._headers  # type: ignore[attr-defined]
        # aiohttp's own call first: its hooks run and its checks hold; then its buffered head
        # is replaced by the same head with the bytes as sent, before anything is written.
        await writer.write_headers(status_line, headers)
        if getattr(writer, "_headers_written", True) or not hasattr(writer, "_headers_buf"):
            return  # not the writer this was written against: aiohttp's head stands
        writer._headers_buf = head_bytes(status_line, headers)
        if getattr(self, "_send_headers_immediately", True):
            writer.send_headers()


class RawHeadResponse(_RawHead, web.Response):
    """A whole body, its head's header bytes as the upstream sent them."""


class RawHeadStreamResponse(_RawHead, web.StreamResponse):
    """A relayed stream, its head's header bytes as the upstream sent them."""
