"""Enforce a policy on a streamed answer: hold back only tool calls, never text.

``StreamEnforcer`` sits between the upstream body and the client. It frames the bytes into SSE
events (blocks ending at a blank line) and parses each with the house decoder
(:class:`proxy.pipeline.capture.sse.SSEDecoder`, fed exactly the same bytes, so there is one
reading of the wire); an event's JSON is read as the client's parser reads it (Python's json
takes ``NaN`` and ``Infinity``). An event that carries no tool call is written to the client at
once, as the bytes it came in; an event that carries a fragment of a tool call is held until
that call is complete, then released unchanged (pass, observe) or removed (strip, block). What
completes a call, and what a removal does to indices, finish reasons and sequence numbers, is
written in ``docs/enforce.md`` (Streamed answers in detail); in short:

* chat: a delta for another tool-call index (or a new ``id`` at the same index), the choice's
  ``finish_reason``; a ``block`` holds every call of a choice until it finishes, since a block
  withholds the answer's calls together;
* Responses: the call's ``response.output_item.done`` (block: the terminal event), and every
  event after a held call waits behind it, so ``output_index`` and ``sequence_number`` can be
  renumbered before anything later is written; a call only the terminal event's ``output``
  holds is judged there and removed from it;
* an upstream cut (EOF with calls still held): :meth:`StreamEnforcer.close` judges them as if
  complete and releases or removes them; it never invents a ``finish_reason`` or ``[DONE]``.

What this module must never do: change or delay a byte of a text-only stream (it passes each
event's own bytes), raise on what a backend sends (an event it cannot read passes through as
is, unless it names a tool call: then an acting mode drops it), or call anything that blocks:
the judge is synchronous and bounded by its caller.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from grader.json import dumps
from proxy.pipeline.capture.accumulate import (
    BLANK,
    CaptureError,
    arguments_text,
    event_json,
    is_index,
    nonempty_str,
)
from proxy.pipeline.capture.sse import SSEDecoder
from proxy.pipeline.enforce.decision import CallJudge, Decision, Enforced

__all__ = [
    "NOTICE_PREFIX",
    "ODD_CHOICE_REASON",
    "ODD_INDEX_REASON",
    "SIBLING_REASON",
    "UNREADABLE",
    "UNREADABLE_EVENT_REASON",
    "StreamEnforcer",
    "notice_line",
]

Api = Literal["chat", "responses"]
Mode = Literal["observe", "block", "strip"]

NOTICE_PREFIX: Final = "[gradeproxy] withheld tool call"
# Why a call that passed its checks is withheld too: a block refuses the answer's calls together.
SIBLING_REASON: Final = "withheld with the blocked call in the same answer"
_LINE_END: Final = re.compile(rb"\r\n|\r|\n")
_LF: Final = 0x0A
_CR: Final = 0x0D
# Delta fields that carry text the client shows (or reasoning it keeps): their presence makes a
# chunk that also carries a tool call split, so that the text is not held back with the call.
_TEXT_FIELDS: Final = ("content", "reasoning_content", "reasoning", "refusal")
_TERMINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})
# Events whose ``response.output`` the openai SDK's helper folds into the items already done
# (matched by ``call_id``): its final response when the terminal event's output is null.
_LIFECYCLE: Final = frozenset({"response.created", "response.queued", "response.in_progress"})
# Responses output items a client executes by name (a custom tool's free-text ``input`` is
# judged as the arguments), and the events that carry their arguments.
_CALL_ITEMS: Final = ("function_call", "custom_tool_call")
_ITEM_EVENTS: Final = ("response.output_item.added", "response.output_item.done")
_ARG_DELTAS: Final = frozenset(
    {"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"}
)
_ARG_DONES: Final = {
    "response.function_call_arguments.done": "arguments",
    "response.custom_tool_call_input.done": "input",
}
_ARG_EVENTS: Final = _ARG_DELTAS | _ARG_DONES.keys()
# What an event's bytes hold when it carries a call: an event that cannot be read but holds
# one of these is dropped in an acting mode (never written raw, docs/enforce.md).
_CALL_MARKERS: Final = (b"tool_calls", b"function_call", b"custom_tool_call")
# The check an enforcement names when what it withheld could not be read (judge.py's failure
# kind of the same name).
UNREADABLE: Final = "unreadable"
ODD_INDEX_REASON: Final = "tool-call index is not a non-negative integer"
UNREADABLE_EVENT_REASON: Final = "an event that carries a tool call could not be read"
ODD_CHOICE_REASON: Final = "a tool call in a choice whose index is not a non-negative integer"


def notice_line(name: str, decision: Decision) -> str:
    """One line of a block notice: ``[gradeproxy] withheld tool call <name>: <reason> (check
    <check>)``; the check part is left out when no check is named."""
    reason = decision.reason or "withheld by policy"
    check = f" (check {decision.check})" if decision.check else ""
    return f"{NOTICE_PREFIX} {name}: {reason}{check}"


def _acts(decision: Decision) -> bool:
    return decision.action in ("block", "strip")


class _Framer:
    """Split a byte stream into SSE event blocks, each ending with its blank line's terminator.

    Only the block boundaries are found here (CR, LF, CRLF, a CRLF split across chunks); the
    fields are read by the shared :class:`SSEDecoder`. A LF that completes a CRLF begun at the end
    of the previous block opens the next block's bytes: a blank line to a client, which changes
    nothing.
    """

    __slots__ = ("_buf", "_line_start", "_scan", "_skip_lf")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0
        self._line_start = 0
        self._skip_lf = False

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        scan, line_start = self._scan, self._line_start
        if self._skip_lf and scan < len(buf):
            self._skip_lf = False
            if buf[scan] == _LF:
                scan += 1
                line_start = scan
        blocks: list[bytes] = []
        cut = 0
        for match in _LINE_END.finditer(buf, scan):
            end = match.end()
            if match.start() == line_start:  # an empty line: the block ends here
                blocks.append(bytes(buf[cut:end]))
                cut = end
            line_start = end
            scan = end
            if buf[end - 1] == _CR and end == len(buf):
                self._skip_lf = True
        if cut:
            del buf[:cut]
            scan -= cut
            line_start -= cut
        self._scan, self._line_start = scan, line_start
        return blocks

    def tail(self) -> bytes:
        """The bytes of an unterminated last block (end of stream)."""
        tail = bytes(self._buf)
        self._buf.clear()
        self._scan = self._line_start = 0
        return tail


@dataclass(slots=True, eq=False)
class _Call:
    """One tool call being held: its fragments' text, and what was decided about it.

    A call may be read more than one way, and every reading is judged (the first that acts
    decides): a chat entry's ``custom`` fragments (``custom.name``/``custom.input``) apart from
    its ``function`` ones, since a client reads whichever the entry's ``type`` names; and a
    Responses item renamed between its ``added`` and ``done`` events (``aliases``), since a
    raw client sees the first name and an accumulating one the last.
    """

    index: int  # the wire index (chat) or output_index (Responses); -1 for an odd chat index
    id: str | None = None
    name: str = ""
    args: list[str] = field(default_factory=list)
    whole_args: str | None = None
    custom: _Call | None = None  # chat: the ``custom`` fragments' reading
    legacy: _Call | None = None  # chat: a legacy ``function_call`` beside ``tool_calls``
    aliases: list[str] = field(default_factory=list)
    # chat: the repr of an ``index`` that is not a non-negative integer (docs/enforce.md)
    odd: str | None = None
    complete: bool = False
    decision: Decision | None = None
    shown: str = ""  # the name the decision was made on (outcomes, notice lines)
    keep: bool | None = None  # None while unresolved
    # Fragments that came for this call once it was judged and written, refused as the
    # client reads the call with them, are withheld alone: ``withheld`` stands in for them
    # (``late``, judged and recorded once; ``StreamEnforcer._rejudge``).
    late: bool = False
    withheld: _Call | None = None

    def add_name(self, fragment: object) -> None:
        """Chat: a name fragment is appended, as the openai SDK's accumulation appends it,
        except a fragment that restates the whole name so far (llama-cpp-python repeats the
        full name in every chunk), which adds nothing (docs/enforce.md, "Chat completions")."""
        if not isinstance(fragment, str) or not fragment or fragment == self.name:
            return
        self.name += fragment

    def set_name(self, name: object) -> None:
        """Responses: an item's name is whole; a different later one replaces it and the earlier
        is kept as an alias, judged too."""
        if not isinstance(name, str) or not name or name == self.name:
            return
        if self.name and self.name not in self.aliases:
            self.aliases.append(self.name)
        self.name = name

    def add_args(self, value: object) -> None:
        if isinstance(value, str):
            self.args.append(value)
        elif value is not None:
            try:
                self.whole_args = arguments_text(value)
            except CaptureError:
                self.whole_args = ""

    @property
    def arguments(self) -> str:
        return self.whole_args if self.whole_args is not None else "".join(self.args)

    def readings(self) -> list[tuple[str, str]]:
        """Every ``(name, arguments)`` a client may take this call for; the first is shown."""
        own = (self.name, self.arguments)
        custom = self.custom
        if custom is None:
            readings = [own]
        elif not self.name and not self.arguments:
            readings = [(custom.name, custom.arguments)]
        else:
            readings = [own, (custom.name, custom.arguments)]
        legacy = self.legacy
        if legacy is not None and (legacy.name or legacy.arguments):
            readings.append((legacy.name, legacy.arguments))
        readings += [(alias, self.arguments) for alias in self.aliases]
        return list(dict.fromkeys(readings))


@dataclass(slots=True, eq=False)
class _Choice:
    calls: list[_Call] = field(default_factory=list)
    finished: bool = False
    text_seen: bool = False


@dataclass(slots=True, eq=False)
class _Held:
    """A held chat event: its bytes, its parsed form, and the call of each fragment in it.

    ``refs[(choice position, entry position)]`` is the call of ``tool_calls[entry]``; the legacy
    ``function_call`` is entry ``-1``. ``finishes`` names the choices whose ``finish_reason`` it
    carries; ``split`` says the object was cut out of a bigger event (never sent raw).
    """

    raw: bytes
    obj: dict[str, Any]
    choices: frozenset[int]
    refs: dict[tuple[int, int], _Call]
    finishes: frozenset[int]
    split: bool


class StreamEnforcer:
    """Feeds an upstream SSE body through, holding back only tool-call events until each call
    is complete, then releasing, stripping or blocking it. Text deltas pass at once (TTFB
    unchanged)."""

    def __init__(self, api: Api, judge: CallJudge, mode: Mode) -> None:
        if api not in ("chat", "responses"):
            raise ValueError(f"unknown API {api!r}")
        if mode not in ("observe", "block", "strip"):
            raise ValueError(f"unknown enforce mode {mode!r}")
        self._api = api
        self._judge = judge
        self._mode = mode
        self._framer = _Framer()
        self._decoder = SSEDecoder()
        self._judged: list[_Call] = []  # in the order the judge saw them
        self._out: list[bytes] = []
        self._closed = False
        # chat
        self._choices: dict[int, _Choice] = {}
        self._queue: list[_Held] = []
        self._envelope: dict[str, Any] | None = None
        self._noticed: set[int] = set()
        # Bumped whenever a call is resolved: a held event can only become writable then, so a
        # long call's fragments do not rescan the queue each (which would be quadratic).
        self._resolutions = 0
        # Responses
        # (bytes, parsed, type, output_index, the call it belongs to when it was read)
        self._rqueue: list[tuple[bytes, dict[str, Any] | None, str, int | None, _Call | None]] = []
        self._items: dict[int, _Call] = {}  # call items by input output_index
        # Call items only the terminal event's output holds (``index``: their place in it)
        self._late: list[_Call] = []
        self._item_ids: dict[int, str | None] = {}
        # The next sequence_number to write; starts at the upstream's first (0 on OpenAI).
        self._seq_out: int | None = None
        self._removed: list[int] = []  # input output_indexes of removed items, ascending
        self._max_index = -1
        self._notice_item: dict[str, Any] | None = None
        self._notice_at: int | None = None  # input output_index whose place the notice took

    @property
    def outcomes(self) -> tuple[Enforced, ...]:
        """One per call the judge saw, in the order they were judged, with the decision as
        applied: in ``block`` mode a refused answer's calls all read ``block`` (a call withheld
        only for its sibling with the sibling's check), as the non-streamed path records them."""
        return tuple(Enforced(call.shown, call.decision) for call in self._judged if call.decision)

    def feed(self, data: bytes) -> bytes:
        """Bytes to write to the client now (may be ``b""``)."""
        if self._closed:
            raise ValueError("feed() after close()")
        for block in self._framer.feed(data):
            self._block(block)
        out = b"".join(self._out)
        self._out.clear()
        return data if self._mode == "observe" else out

    def close(self) -> bytes:
        """At upstream EOF: whatever is still held, judged as complete and resolved.

        A stream cut before its calls finished is resolved as if they had (a client that reads a
        cut stream would otherwise act on a call nobody judged), but nothing is invented: no
        ``finish_reason``, ``[DONE]`` or terminal Responses event is added. An unterminated last
        event passes as it came, unless it carries a tool call (a client discards it anyway).
        """
        if self._closed:
            return b""
        self._closed = True
        tail = self._framer.tail()
        tail_events = [*self._decoder.feed_raw(tail), *self._decoder.close_raw(flush=True)]
        self._end()
        if tail and not any(_carries_call(data) for _, data, _, _ in tail_events):
            self._out.append(tail)
        out = b"".join(self._out)
        self._out.clear()
        return b"" if self._mode == "observe" else out  # observe: feed returned every byte

    # -- framing and dispatch -----------------------------------------------------------

    def _block(self, raw: bytes) -> None:
        events = self._decoder.feed_raw(raw)
        if not events:
            self._free(raw)
            return
        event, data, _, _ = events[-1]
        if data.lstrip().startswith(b"[DONE]"):
            # The SDK stops reading at any data starting with [DONE] (``[DONE]x`` too): whatever
            # is still held is resolved before it.
            self._end()
            self._out.append(raw)
            return
        try:
            obj = event_json(data, 0)
        except CaptureError:
            # What the client's parser reads is what is judged: Python's json (the openai SDK's)
            # takes NaN and Infinity, which the exact reader refuses.
            obj = _lenient_json(data)
            if obj is None and _carries_call(data):
                self._unreadable_event()
                return
        if not isinstance(obj, dict) or obj is BLANK:
            self._free(raw)
            return
        if self._api == "chat":
            self._chat_event(raw, obj)
        else:
            self._responses_event(raw, event, obj)

    def _unreadable_event(self, reason: str = UNREADABLE_EVENT_REASON) -> None:
        """An event that names a tool call but that no JSON reader takes: in an acting mode it
        is dropped (a client with a laxer reader could act on a call nobody judged), and
        recorded as a call withheld as ``unreadable``; ``observe`` records what it would do."""
        decision = self._unreadable(reason)
        call = _Call(index=-1, odd="event", complete=True, decision=decision, keep=False)
        self._judged.append(call)

    def _unreadable(self, reason: str) -> Decision:
        """What is done with a call that could not be read: withheld in an acting mode, and in
        ``observe`` counted as what the acting mode would do."""
        if self._mode == "observe":
            return Decision("observe", UNREADABLE, reason, would="block")
        return Decision(self._mode, UNREADABLE, reason)

    def _free(self, raw: bytes) -> None:
        if self._api == "responses" and self._rqueue:
            self._rqueue.append((raw, None, "", None, None))
        else:
            self._out.append(raw)

    def _end(self) -> None:
        """The answer is over (``[DONE]`` or EOF): resolve and write what is still held."""
        if self._api == "chat":
            self._end_chat()
            return
        self._resolve_items()
        self._rdrain()

    def _judge_call(self, call: _Call) -> Decision:
        """Judge every reading of the call; the first that acts (else the first that says
        anything but pass, else the first) is its decision. A chat call with an odd ``index``
        the judge passes is withheld all the same (``unreadable``; observe counts it): clients
        disagree on which call such a fragment belongs to."""
        shown, decision = self._verdict(call)
        if call.odd is not None and decision.action == "pass":
            decision = self._unreadable(ODD_INDEX_REASON)
        call.decision, call.shown = decision, shown
        self._judged.append(call)
        return decision

    def _verdict(self, call: _Call) -> tuple[str, Decision]:
        judged = [(name, self._judge(name, args)) for name, args in call.readings()]
        return next(
            (pair for pair in judged if _acts(pair[1])),
            next((pair for pair in judged if pair[1].action != "pass"), judged[0]),
        )

    def _rejudge(self, call: _Call, reading: _Call) -> _Call:
        """A fragment changed how a client reads a call already judged (a chat name or
        arguments after its ``finish_reason`` or after a later call began; a Responses item
        event after its ``output_item.done``): ``reading`` is the call read with it, judged
        now. Still held (``block`` before the answer ends): the call is judged again, in
        place. Already written: a refused fragment is withheld alone (the returned stand-in
        keeps nothing); one that passes, or one of a call removed, follows the call."""
        if call.keep is False:
            return call
        shown, decision = self._verdict(reading)
        if decision.action == "pass":
            return call
        if call.keep is None:
            if not _acts(decision) and call.decision is not None and _acts(call.decision):
                return call  # a refusal stands
            self._judged.remove(call)
            call.decision, call.shown = decision, shown
            self._judged.append(call)
            return call
        if call.withheld is None:
            withheld = replace(reading, args=list(reading.args), late=True, withheld=None)
            withheld.decision, withheld.shown = decision, shown
            withheld.keep = self._mode == "observe"
            self._judged.append(withheld)
            call.withheld = withheld
        return call.withheld

    def _block_together(self, calls: list[_Call]) -> None:
        """``block``: one refused call withholds every call of the answer; each then reads
        ``block``, a sibling with the refused call's check and :data:`SIBLING_REASON`."""
        cause = next((c.decision for c in calls if c.decision and _acts(c.decision)), None)
        for call in calls:
            decision = call.decision
            if cause is not None:
                call.decision = (
                    Decision("block", decision.check, decision.reason)
                    if decision is not None and _acts(decision)
                    else Decision("block", cause.check, SIBLING_REASON)
                )
            call.keep = cause is None

    # -- chat completions ---------------------------------------------------------------

    def _chat_event(self, raw: bytes, obj: dict[str, Any]) -> None:
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            self._out.append(raw)  # usage chunk, error object, anything without choices
            return
        odd = [
            position
            for position, entry in enumerate(choices)
            if isinstance(entry, dict)
            and not is_index(entry.get("index", position))
            and _carries_fragment(entry.get("delta"))
        ]
        if odd:
            # A choice index that is no non-negative integer ("0", true, -1) keys no choice the
            # proxy can hold, while the SDK's raw iteration hands its calls over all the same
            # (its helper reads true as 1 and -1 as the last): its call fragments are dropped
            # in an acting mode, recorded as unreadable.
            self._unreadable_event(ODD_CHOICE_REASON)
            if self._mode != "observe":
                choices = [
                    {**entry, "delta": _without_calls(entry["delta"])} if position in odd else entry
                    for position, entry in enumerate(choices)
                ]
                obj = {**obj, "choices": choices}
                raw = _chat_block(obj)
        self._envelope = obj
        resolutions = self._resolutions
        refs: dict[tuple[int, int], _Call] = {}
        finishes: set[int] = set()
        numbers: set[int] = set()
        texty: set[int] = set()
        for position, entry in enumerate(choices):
            if not isinstance(entry, dict):
                continue
            number = entry.get("index", position)
            if not is_index(number):
                continue
            choice = self._choices.setdefault(number, _Choice())
            delta = entry.get("delta")
            if isinstance(delta, dict):
                if any(nonempty_str(delta.get(key)) for key in _TEXT_FIELDS):
                    texty.add(position)
                    if nonempty_str(delta.get("content")):
                        choice.text_seen = True
                self._register(choice, position, delta, refs)
            if nonempty_str(entry.get("finish_reason")) and choice.calls:
                finishes.add(position)
            if any(key[0] == position for key in refs) or position in finishes:
                numbers.add(number)
        finishing = frozenset(choices[position].get("index", position) for position in finishes)
        for number in sorted(finishing):
            self._finish_choice(self._choices[number])
        if not refs and not finishes:
            self._out.append(raw)
            return
        pending = any(call.keep is None for call in refs.values())
        split = False
        if pending and texty and not finishes:
            # Text rides with an unresolved call: the text goes now, the call waits.
            free = _chat_part(obj, calls=False)
            held = _chat_part(obj, calls=True)
            if free is not None:
                self._out.append(_chat_block(free))
            if held is None:
                return
            obj, split = held, True
        self._queue.append(_Held(raw, obj, frozenset(numbers), refs, finishing, split))
        if self._resolutions != resolutions or not pending:
            self._drain()

    def _end_chat(self) -> None:
        for choice in self._choices.values():
            # (a fragment after the choice's finish_reason, a protocol slip, is judged here too)
            if not choice.finished or any(call.keep is None for call in choice.calls):
                self._finish_choice(choice)
        self._drain()
        for number, choice in sorted(self._choices.items()):
            self._block_notice(number, choice, None)

    def _register(
        self,
        choice: _Choice,
        position: int,
        delta: dict[str, Any],
        refs: dict[tuple[int, int], _Call],
    ) -> None:
        """Attach each tool-call fragment of a delta to its call, completing earlier calls."""
        entries = delta.get("tool_calls")
        legacy = delta.get("function_call")
        first: _Call | None = None
        if isinstance(entries, list):
            for slot, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    continue
                # A missing index: the server lists calls in order. One that is there but no
                # non-negative integer (a string, a bool, -1, 0.5) keys a call of its own,
                # withheld in an acting mode (``_judge_call``).
                raw_index = entry.get("index")
                odd: str | None = None
                if raw_index is None:
                    index = slot
                elif is_index(raw_index):
                    index = raw_index
                else:
                    index, odd = -1, repr(raw_index)
                call_id = nonempty_str(entry.get("id"))
                call = self._call_for(choice, index, call_id, odd)
                before = call.readings() if call.complete else None
                function = entry.get("function")
                if isinstance(function, dict):
                    call.add_name(function.get("name"))
                    call.add_args(function.get("arguments"))
                custom = entry.get("custom")
                if isinstance(custom, dict):
                    if call.custom is None:
                        call.custom = _Call(index=call.index)
                    call.custom.add_name(custom.get("name"))
                    call.custom.add_args(custom.get("input"))
                if first is None and isinstance(legacy, dict):
                    # llama.cpp mirrors tool_calls[0] here; a client of the legacy API reads
                    # the mirror, so it is a reading of that call (the same, when it mirrors).
                    if call.legacy is None:
                        call.legacy = _Call(index=call.index)
                    call.legacy.add_name(legacy.get("name"))
                    call.legacy.add_args(legacy.get("arguments"))
                if before is not None and call.readings() != before:
                    call = self._rejudge(call, call)
                refs[(position, slot)] = call
                first = first or call
        if isinstance(legacy, dict):
            if first is not None:
                refs[(position, -1)] = first
            else:
                call = self._call_for(choice, 0, None, None)
                before = call.readings() if call.complete else None
                call.add_name(legacy.get("name"))
                call.add_args(legacy.get("arguments"))
                if before is not None and call.readings() != before:
                    call = self._rejudge(call, call)
                refs[(position, -1)] = call

    def _call_for(self, choice: _Choice, index: int, call_id: str | None, odd: str | None) -> _Call:
        same = [call for call in choice.calls if call.index == index and call.odd == odd]
        current = same[-1] if same else None
        starts = current is None or (
            call_id is not None and current.id is not None and call_id != current.id
        )
        if not starts and current is not None:
            if call_id and current.id is None:
                current.id = call_id
            return current
        # A new call completes every open one: the wire sends one call's fragments at a time.
        for other in choice.calls:
            if not other.complete:
                self._complete(other)
        call = _Call(index=index, id=call_id, odd=odd)
        choice.calls.append(call)
        return call

    def _complete(self, call: _Call) -> None:
        call.complete = True
        self._resolutions += 1
        decision = self._judge_call(call)
        if self._mode == "strip":
            call.keep = not _acts(decision)
        elif self._mode == "observe":
            call.keep = True
        # block: resolved when the choice finishes, the answer's calls together.

    def _finish_choice(self, choice: _Choice) -> None:
        choice.finished = True
        self._resolutions += 1
        for call in choice.calls:
            if not call.complete:
                self._complete(call)
        if self._mode == "block":
            self._block_together(choice.calls)

    def _drain(self) -> None:
        """Write every held event whose calls are resolved, in order within each choice."""
        blocked: set[int] = set()
        kept: list[_Held] = []
        for held in self._queue:
            unresolved = any(call.keep is None for call in held.refs.values())
            if held.choices & blocked or unresolved:
                blocked |= held.choices
                kept.append(held)
                continue
            for number in sorted(held.finishes):
                self._block_notice(number, self._choices[number], held.obj)
            rewritten = self._rewrite(held)
            if rewritten is not None:
                self._out.append(rewritten)
        self._queue = kept

    def _rewrite(self, held: _Held) -> bytes | None:
        """The held event as the client gets it: raw when nothing changed, ``None`` when empty."""
        obj = held.obj
        choices = obj.get("choices")
        assert isinstance(choices, list)
        changed = held.split
        new_choices: list[Any] = []
        for position, entry in enumerate(choices):
            if not isinstance(entry, dict):
                new_choices.append(entry)
                continue
            number = entry.get("index", position)
            choice = self._choices.get(number) if is_index(number) else None
            delta = entry.get("delta")
            entry_changed = False
            if isinstance(delta, dict) and choice is not None:
                delta, entry_changed = self._rewrite_delta(choice, position, delta, held.refs)
            finish = entry.get("finish_reason")
            if (
                choice is not None
                and number in held.finishes
                and finish in ("tool_calls", "function_call")
                and choice.calls
                and not any(call.keep for call in choice.calls)
            ):
                finish, entry_changed = "stop", True
            if not entry_changed:
                new_choices.append(entry)
                continue
            changed = True
            if _empty_delta(delta) and finish is None and entry.get("logprobs") is None:
                continue
            new_choices.append({**entry, "delta": delta, "finish_reason": finish})
        if not changed:
            return held.raw
        if not new_choices and obj.get("usage") is None:
            return None
        return _chat_block({**obj, "choices": new_choices})

    def _rewrite_delta(
        self,
        choice: _Choice,
        position: int,
        delta: dict[str, Any],
        refs: dict[tuple[int, int], _Call],
    ) -> tuple[dict[str, Any], bool]:
        changed = False
        out = dict(delta)
        entries = delta.get("tool_calls")
        if isinstance(entries, list) and entries:
            new_entries: list[Any] = []
            for slot, entry in enumerate(entries):
                call = refs.get((position, slot))
                if call is None:
                    new_entries.append(entry)
                    continue
                if not call.keep:
                    changed = True
                    continue
                index = self._new_index(choice, call)
                if (
                    isinstance(entry, dict)
                    and entry.get("index") != index
                    and is_index(entry.get("index"))
                ):
                    entry = {**entry, "index": index}
                    changed = True
                new_entries.append(entry)
            if new_entries:
                out["tool_calls"] = new_entries
            else:
                del out["tool_calls"]
        legacy_call = refs.get((position, -1))
        legacy = delta.get("function_call")
        if legacy_call is not None and isinstance(legacy, dict) and not legacy_call.keep:
            del out["function_call"]
            changed = True
        return (out, True) if changed else (delta, False)

    def _new_index(self, choice: _Choice, call: _Call) -> int:
        """The call's index once removed calls are gone: indices stay contiguous from 0."""
        calls = [c for c in choice.calls if c.odd is None]
        removed = {c.index for c in calls if c.index < call.index and c.keep is False}
        removed -= {c.index for c in calls if c.keep}
        return call.index - len(removed)

    def _block_notice(self, number: int, choice: _Choice, envelope: dict[str, Any] | None) -> None:
        """In ``block`` mode, say in the choice's text which calls were withheld and why."""
        if self._mode != "block" or not choice.calls or any(c.keep for c in choice.calls):
            return
        if number in self._noticed or any(c.keep is None for c in choice.calls):
            return
        lines = [
            notice_line(call.shown, call.decision or Decision("block")) for call in choice.calls
        ]
        text = ("\n" if choice.text_seen else "") + "\n".join(lines)
        base = envelope if envelope is not None else (self._envelope or {})
        chunk = {k: v for k, v in base.items() if k not in ("choices", "usage")}
        chunk["choices"] = [
            {"index": number, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        ]
        if "usage" in base:
            chunk["usage"] = None
        self._out.append(_chat_block(chunk))
        self._noticed.add(number)

    # -- Responses ----------------------------------------------------------------------

    def _responses_event(self, raw: bytes, event: str, obj: dict[str, Any]) -> None:
        kind_field = obj.get("type")
        kind = kind_field if isinstance(kind_field, str) else event
        index = obj.get("output_index")
        index = index if is_index(index) else None
        if index is not None:
            self._max_index = max(self._max_index, index)
        item = obj.get("item")
        item_call = (
            kind in _ITEM_EVENTS and isinstance(item, dict) and item.get("type") in _CALL_ITEMS
        )
        args_event = kind in _ARG_EVENTS
        if index is None and (item_call or args_event):
            # A call's event at no readable output_index: nothing to hold it by or renumber
            # it with, so it is dropped (the call item's events recorded as unreadable).
            if item_call:
                self._unreadable_event()
            return
        if item_call and isinstance(item, dict) and index is not None and index not in self._items:
            # From its added event, or its done event when there was none (or the added one
            # announced another type).
            added = _Call(index=index, id=nonempty_str(item.get("call_id")))
            added.set_name(item.get("name"))
            arguments = _item_arguments(item)
            if nonempty_str(arguments):
                added.add_args(arguments)
            self._items[index] = added
            self._item_ids[index] = nonempty_str(item.get("id"))
        call = self._items.get(index) if index is not None else None
        if call is None and args_event:
            return  # arguments of no call (its item event was dropped): nothing to judge or show
        if call is not None and not call.complete:
            if kind in _ARG_DELTAS:
                call.add_args(obj.get("delta"))
            elif kind in _ARG_DONES and isinstance(obj.get(_ARG_DONES[kind]), str):
                call.whole_args = obj[_ARG_DONES[kind]]
                call.set_name(obj.get("name"))  # OpenAI names the call here too
            elif kind == "response.output_item.done" and isinstance(item, dict):
                call.set_name(item.get("name"))
                arguments = _item_arguments(item)
                if isinstance(arguments, str):
                    call.whole_args = arguments
                self._complete_item(call)
        elif call is not None and (item_call or args_event):
            # An event for a call already judged (a second done, another item at the same
            # output_index, arguments after the done): each event is read whole, so it is
            # judged as it reads, beside the call's own name.
            reading = replace(call, args=[], aliases=[*call.aliases, call.name], late=True)
            if item_call and isinstance(item, dict):
                reading.set_name(item.get("name"))
                arguments = _item_arguments(item)
                reading.whole_args = arguments if isinstance(arguments, str) else call.arguments
            elif kind in _ARG_DELTAS and isinstance(obj.get("delta"), str):
                reading.whole_args = call.arguments + obj["delta"]
            elif kind in _ARG_DONES and isinstance(obj.get(_ARG_DONES[kind]), str):
                reading.whole_args = obj[_ARG_DONES[kind]]
                reading.set_name(obj.get("name"))
            if reading.readings() != call.readings():
                call = self._rejudge(call, reading)
        if kind in _LIFECYCLE:
            raw, obj = self._judge_lifecycle(raw, kind, obj)
        self._rqueue.append((raw, obj, kind, index, call))
        if kind in _TERMINAL:
            self._judge_output(obj.get("response"))
            self._resolve_items()
        self._rdrain()

    def _judge_lifecycle(
        self, raw: bytes, kind: str, obj: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        """A ``response.created`` / ``queued`` / ``in_progress`` event whose output holds call
        items: the openai SDK's helper takes each as the new state of the done item with its
        ``call_id``, so each is judged as a reading of that call (or on its own); a refused one
        leaves the event's output in an acting mode."""
        response = obj.get("response")
        output = response.get("output") if isinstance(response, dict) else None
        if not isinstance(output, list) or not isinstance(response, dict):
            return raw, obj
        by_call = {call.id: call for call in self._items.values() if call.id}
        kept: list[Any] = []
        for item in output:
            if not isinstance(item, dict) or item.get("type") not in _CALL_ITEMS:
                kept.append(item)
                continue
            call_id = nonempty_str(item.get("call_id"))
            seen = by_call.get(call_id) if call_id is not None else None
            if seen is not None:
                reading = replace(seen, args=[], aliases=[*seen.aliases, seen.name], late=True)
            else:
                reading = _Call(index=-1, id=call_id, late=True)
            reading.set_name(item.get("name"))
            try:
                arguments = _item_arguments(item)
                reading.whole_args = "" if arguments is None else arguments_text(arguments)
            except CaptureError:
                reading.whole_args = ""
            if seen is not None and reading.readings() == seen.readings():
                kept.append(item)
                continue
            shown, decision = self._verdict(reading)
            if decision.action == "pass":
                kept.append(item)
                continue
            if seen is not None:
                self._rejudge(seen, reading)
            else:
                reading.decision, reading.shown, reading.keep = decision, shown, False
                self._judged.append(reading)
            if self._mode == "observe":
                kept.append(item)
        if len(kept) == len(output):
            return raw, obj
        obj = {**obj, "response": {**response, "output": kept}}
        return _responses_block(kind, obj), obj

    def _judge_output(self, response: object) -> None:
        """At the terminal event: judge every call item of ``response.output`` that is not a
        call already judged as it stands (same item, name and arguments), such as one that only
        appears here. A client's accumulated response is this output (the openai SDK's helper
        returns it as the final response), so what it holds is what must have been judged."""
        output = response.get("output") if isinstance(response, dict) else None
        if not isinstance(output, list):
            return
        by_position = len(output) == self._max_index + 1
        by_item = {item_id: i for i, item_id in self._item_ids.items() if item_id}
        by_call = {call.id: i for i, call in self._items.items() if call.id}
        for position, item in enumerate(output):
            if not isinstance(item, dict) or item.get("type") not in _CALL_ITEMS:
                continue
            item_id = nonempty_str(item.get("id"))
            call_id = nonempty_str(item.get("call_id"))
            if item_id is not None and item_id in by_item:
                seen = self._items.get(by_item[item_id])
            elif call_id is not None and call_id in by_call:
                seen = self._items.get(by_call[call_id])
            else:
                seen = self._items.get(position) if by_position else None
            arguments = _item_arguments(item)
            try:
                text = "" if arguments is None else arguments_text(arguments)
            except CaptureError:
                text = ""
            if seen is not None and item.get("name") == seen.name and text == seen.arguments:
                continue
            late = _Call(index=position, id=call_id)
            late.set_name(item.get("name"))
            late.whole_args = text
            self._late.append(late)
            self._complete_item(late)

    def _complete_item(self, call: _Call) -> None:
        call.complete = True
        decision = self._judge_call(call)
        if self._mode == "strip":
            call.keep = not _acts(decision)
        elif self._mode == "observe":
            call.keep = True

    def _resolve_items(self) -> None:
        for call in self._items.values():
            if not call.complete:
                self._complete_item(call)
        if self._mode == "block":
            self._block_together(self._all_items())

    def _all_items(self) -> list[_Call]:
        """Every Responses call: the streamed items in output order, then the terminal's own."""
        return [*sorted(self._items.values(), key=lambda c: c.index), *self._late]

    def _rdrain(self) -> None:
        """Write queued events from the front up to the first one of an unresolved call."""
        queue = self._rqueue
        taken = 0
        for raw, obj, kind, index, call in queue:
            if call is not None and call.keep is None:
                break
            taken += 1
            if call is not None and call.late:
                continue  # a refused event of a call already written: withheld alone
            if obj is None:
                self._out.append(raw)
                continue
            if (
                kind in _TERMINAL
                and self._mode == "block"
                and self._notice_item is None
                and any(late.keep is False for late in self._late)
            ):
                # Only calls the terminal event holds are withheld: the notice goes after every
                # item written so far, just before the terminal event.
                self._emit_notice_item(self._max_index + 1)
            if call is not None and call.keep is False and index is not None:
                if self._mode == "block" and self._notice_item is None:
                    # The notice takes the place of the first withheld call.
                    self._emit_notice_item(index)
                if index not in self._removed:
                    self._removed.append(index)
                    self._removed.sort()
                continue
            self._emit_response_event(raw, obj, kind, index)
        del queue[:taken]

    def _emit_response_event(
        self, raw: bytes, obj: dict[str, Any], kind: str, index: int | None
    ) -> None:
        changes: dict[str, Any] = {}
        seq = obj.get("sequence_number")
        if is_index(seq):
            if self._seq_out is None:
                self._seq_out = seq
            if seq != self._seq_out:
                changes["sequence_number"] = self._seq_out
            self._seq_out += 1
        if index is not None:
            shifted = self._out_index(index)
            if shifted != index:
                changes["output_index"] = shifted
        response = obj.get("response")
        if kind in _TERMINAL and isinstance(response, dict):
            output = response.get("output")
            late_gone = {late.index for late in self._late if late.keep is False}
            if isinstance(output, list) and (
                self._removed or self._notice_item is not None or late_gone
            ):
                removed_ids = {self._item_ids.get(r) for r in self._removed} - {None}
                by_position = len(output) == self._max_index + 1
                new_output = []
                for position, item in enumerate(output):
                    if position not in late_gone and not _removed_item(
                        item, position, removed_ids, self._removed, by_position
                    ):
                        new_output.append(item)
                    elif self._notice_item is not None and self._notice_item not in new_output:
                        new_output.append(self._notice_item)
                changes["response"] = {**response, "output": new_output}
        if not changes:
            self._out.append(raw)
            return
        self._out.append(_responses_block(kind, {**obj, **changes}))

    def _out_index(self, index: int) -> int:
        """An upstream ``output_index`` as the client numbers it: removed items before it gone,
        the block notice (in the first withheld call's place) counted."""
        shifted = index - sum(1 for r in self._removed if r < index)
        if self._notice_at is not None and index > self._notice_at:
            shifted += 1
        return shifted

    def _emit_notice_item(self, first: int) -> None:
        """In ``block`` mode, a message item that says which calls were withheld and why, in
        the place of the first withheld call (input ``output_index`` ``first``)."""
        withheld = [c for c in self._all_items() if c.keep is False]
        text = "\n".join(notice_line(c.shown, c.decision or Decision("block")) for c in withheld)
        index = self._out_index(first)
        self._notice_at = first
        item_id = "msg_gradeproxy_notice"
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        done_item = {
            "id": item_id,
            "type": "message",
            "status": "completed",
            "content": [part],
            "role": "assistant",
        }
        self._notice_item = done_item
        common = {"item_id": item_id, "output_index": index, "content_index": 0}
        events: list[dict[str, Any]] = [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**done_item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **common, "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **common, "delta": text, "logprobs": []},
            {"type": "response.output_text.done", **common, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **common, "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": done_item},
        ]
        for event in events:
            kind = event["type"]
            seq = self._seq_out or 0
            body = {"type": kind, "sequence_number": seq, **event}
            self._seq_out = seq + 1
            self._out.append(_responses_block(kind, body))


def _carries_call(data: bytes) -> bool:
    return any(marker in data for marker in _CALL_MARKERS)


def _lenient_json(data: bytes) -> Any:
    """Event data as Python's json reads it (NaN, Infinity), or None when it cannot."""
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def _item_arguments(item: dict[str, Any]) -> Any:
    """A Responses call item's arguments: ``arguments``, or a custom tool call's ``input``."""
    return item.get("arguments") if item.get("type") != "custom_tool_call" else item.get("input")


def _removed_item(
    item: object, position: int, ids: set[str | None], removed: list[int], by_position: bool
) -> bool:
    if not isinstance(item, dict) or item.get("type") not in _CALL_ITEMS:
        return False
    if item.get("id") in ids:
        return True
    return by_position and position in removed


def _empty_delta(delta: object) -> bool:
    return not isinstance(delta, dict) or all(value is None for value in delta.values())


_CALL_KEYS: Final = ("tool_calls", "function_call")


def _carries_fragment(delta: object) -> bool:
    """Whether a chat delta carries a tool-call fragment, of whatever shape."""
    return isinstance(delta, dict) and any(delta.get(key) is not None for key in _CALL_KEYS)


def _without_calls(delta: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in delta.items() if key not in _CALL_KEYS}


def _chat_part(obj: dict[str, Any], *, calls: bool) -> dict[str, Any] | None:
    """The event with only its tool-call fragments (``calls``) or only everything else."""
    choices: list[Any] = []
    for entry in obj["choices"]:
        if not isinstance(entry, dict):
            if not calls:
                choices.append(entry)
            continue
        delta = entry.get("delta")
        if not isinstance(delta, dict):
            if not calls:
                choices.append(entry)
            continue
        call_keys = ("tool_calls", "function_call")
        if calls:
            part = {k: v for k, v in delta.items() if k in call_keys}
            if any(v is not None for v in part.values()):
                choices.append({**entry, "delta": part, "finish_reason": None, "logprobs": None})
        else:
            part = {k: v for k, v in delta.items() if k not in call_keys}
            choices.append({**entry, "delta": part})
    if not choices:
        return None
    result = {k: v for k, v in obj.items() if k != "usage" or not calls}
    result["choices"] = choices
    return result


def _chat_block(obj: dict[str, Any]) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def _responses_block(kind: str, obj: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + dumps(obj) + b"\n\n"
