"""Incremental Server-Sent Events decoder over raw byte chunks.

The proxy relays upstream bytes untouched and decodes a *copy* here, so this module may never
assume anything about how the transport chopped the stream: a chunk can end inside a multi-byte
UTF-8 character, between the CR and LF of a CRLF, or in the middle of a 1 MB ``data:`` line.
The rules are the WHATWG "event stream interpretation" ones, because that is what every client
of the proxy (browsers, openai-python's ``SSEDecoder``) applies to the same bytes; decoding the
copy any other way would grade an answer the client never saw.

Lines are split on bytes (CR and LF never occur inside a UTF-8 sequence), and so are their
fields (the colon and the field names are ASCII): a text field is decoded once, with
replacement, when it is complete, which gives what decoding each line first would give. An
event's data stays bytes until it is dispatched (``feed``), or for good (``feed_raw``: the
captures hand them to orjson). A partial line is kept as a list of byte pieces and joined once,
so feeding a long line one byte at a time stays linear.
"""

from __future__ import annotations

import re
from typing import Final

from grader.values import value_type

__all__ = ["RawEvent", "SSEDecoder", "SSEEvent"]

_LINE_END: Final = re.compile(rb"\r\n|\r|\n")
_BOM: Final = b"\xef\xbb\xbf"
_LF: Final = 0x0A
_CR: Final = 0x0D
_COLON: Final = 0x3A


@value_type
class SSEEvent:
    """One dispatched event.

    ``id`` is the decoder's last-event-ID at dispatch time (it persists across events, as in the
    spec) and is ``None`` only while no ``id:`` field has been seen. ``retry`` is the
    reconnection time set inside this event's block, if any.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


# An event with its data undecoded: (event type, data as UTF-8 bytes, last event ID, retry).
RawEvent = tuple[str, bytes, str | None, int | None]


class SSEDecoder:
    """Feed byte chunks, get the events completed so far.

    One decoder per stream: it carries the partial line, the fields of the event being built
    and the last event ID from one chunk to the next.
    """

    __slots__ = (
        "_closed",
        "_comments",
        "_data",
        "_event",
        "_last_id",
        "_partial",
        "_reconnect",
        "_retry",
        "_skip_lf",
        "_started",
    )

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        # A chunk that ended on CR may be followed by the LF of the same CRLF.
        self._skip_lf = False
        # The BOM is only stripped from the very first line of the stream.
        self._started = False
        self._closed = False
        self._data: list[bytes] = []
        self._event = ""
        self._retry: int | None = None
        self._last_id: str | None = None
        self._reconnect: int | None = None
        self._comments = 0

    @property
    def last_event_id(self) -> str | None:
        """The last-event-ID buffer: what a reconnecting client would send back."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The latest valid ``retry:`` value, even one in a block that dispatched nothing."""
        return self._reconnect

    @property
    def comments(self) -> int:
        """How many ``:`` comment lines (keep-alives) were seen; they never become events."""
        return self._comments

    @property
    def pending(self) -> bool:
        """Whether an unterminated line or an undispatched event is buffered."""
        return bool(self._partial) or bool(self._data)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode one chunk; return the events its bytes completed, in order."""
        return [_event(raw) for raw in self.feed_raw(chunk)]

    def feed_raw(self, chunk: bytes) -> list[RawEvent]:
        """:meth:`feed` with each event's data left as bytes: ``(event, data, id, retry)``.

        The captures read the data as JSON, which orjson parses from the bytes themselves;
        decoding it to text first (and building an :class:`SSEEvent`) cost a grade job more
        than the split did. ``data.decode("utf-8", "replace")`` is the event's ``data``: every
        line is decoded whole either way, and a split at an ASCII byte (the LF that joins data
        lines) never changes what a replacement replaces.
        """
        if self._closed:
            raise ValueError("feed() after close()")
        events: list[RawEvent] = []
        if not self._skip_lf and b"\r" not in chunk:
            # No CR anywhere (what every LLM server sends): lines end at LF alone, and one C
            # split finds them all, where the general scan below costs a match object a line.
            *lines, tail = chunk.split(b"\n")
            if lines and self._partial:
                self._partial.append(lines[0])
                lines[0] = b"".join(self._partial)
                self._partial.clear()
            data = self._data
            for line in lines:
                # The two lines of nearly every event, taken here: _line's checks cost as much
                # as the rest of the event's decoding. Anything else (and the stream's first
                # line, which may open with a BOM) goes through _line.
                if line.startswith(b"data: ") and self._started:
                    data.append(line[6:])
                elif not line and self._started:
                    self._dispatch(events)
                else:
                    self._line(line, events)
            if tail:
                self._partial.append(tail)
            return events
        start = 0
        size = len(chunk)
        if size and self._skip_lf:
            self._skip_lf = False
            if chunk[0] == _LF:
                start = 1
        for match in _LINE_END.finditer(chunk, start):
            end = match.start()
            if self._partial:
                self._partial.append(chunk[start:end])
                line = b"".join(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:end]
            self._line(line, events)
            start = match.end()
            if chunk[start - 1] == _CR:
                # A lone CR at the end of the chunk: its LF may open the next one.
                self._skip_lf = start == size
        if start < size:
            self._partial.append(chunk[start:])
        return events

    def close(self, *, flush: bool = False) -> list[SSEEvent]:
        """End the stream.

        The spec discards an event that the stream ended inside (no blank line after it), and
        so do spec-following clients; that is the default, which always returns ``[]``. With
        ``flush=True`` end-of-stream also ends the last line and the last event, for callers
        that prefer salvaging an unterminated final event to dropping it.
        """
        return [_event(raw) for raw in self.close_raw(flush=flush)]

    def close_raw(self, *, flush: bool = False) -> list[RawEvent]:
        """:meth:`close`, its events' data left as bytes (:meth:`feed_raw`)."""
        if self._closed:
            return []
        self._closed = True
        events: list[RawEvent] = []
        if flush:
            if self._partial:
                line = b"".join(self._partial)
                self._partial.clear()
                self._line(line, events)
            self._line(b"", events)
        self._partial.clear()
        self._data.clear()
        return events

    def _line(self, raw: bytes, events: list[RawEvent]) -> None:
        if not self._started:
            self._started = True
            if raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
        if not raw:
            self._dispatch(events)
            return
        if raw[0] == _COLON:
            self._comments += 1
            return
        # Split on bytes: the colon is ASCII, so the name and value are those of the decoded
        # line, and only the fields that are text are decoded.
        name, colon, value = raw.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():  # bytes: ASCII digits only
            self._retry = self._reconnect = int(value)
        # Any other field name is ignored, as the spec says.

    def _dispatch(self, events: list[RawEvent]) -> None:
        if self._data:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            events.append((self._event or "message", data, self._last_id, self._retry))
            self._data.clear()
        self._event = ""
        self._retry = None


def _event(raw: RawEvent) -> SSEEvent:
    event, data, last_id, retry = raw
    return SSEEvent(event=event, data=data.decode("utf-8", "replace"), id=last_id, retry=retry)
