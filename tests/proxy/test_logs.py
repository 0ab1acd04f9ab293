"""The canonical request line's fast path (proxy/logs.py) writes what structlog's chain writes:
the same keys in the same order, the same values, escaped the same way, at the same levels."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from proxy import logs
from proxy.logs import configure_logging, get_logger, request_log

SURROGATE = b"/v1/\xff".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(
            {"request_id": "r1", "status": 200, "stream": False, "task": None, "bytes": 403},
            id="typical",
        ),
        pytest.param({"path": SURROGATE, "status": 400}, id="lone_surrogate_escaped"),
        pytest.param({"bytes": 2**70, "skip": "no_task_header"}, id="int_beyond_64_bits"),
        pytest.param({"duration_ms": 1.234, "trace_id": "0af7651916cd43dd"}, id="floats_and_ids"),
    ],
)
def test_fast_line_equals_the_structlog_chain_line(
    capfdbinary: pytest.CaptureFixture[bytes], fields: dict[str, Any]
) -> None:
    configure_logging("info", "json", cache=False)
    request_log.info("request", **fields)
    get_logger("gradeproxy.request").info("request", **fields)
    fast, chain = capfdbinary.readouterr().out.splitlines()
    fast_entry, chain_entry = orjson.loads(fast), orjson.loads(chain)
    assert list(fast_entry) == list(chain_entry)  # key order too: the line is read by people
    fast_stamp, chain_stamp = fast_entry.pop("timestamp"), chain_entry.pop("timestamp")
    assert fast_entry == chain_entry
    assert (fast_stamp[-1], len(fast_stamp)) == (chain_stamp[-1], len(chain_stamp))
    moments = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (fast_stamp, chain_stamp)]
    assert timedelta(0) <= moments[1] - moments[0] < timedelta(seconds=1)


@pytest.mark.parametrize(
    ("level", "fmt", "expected"),
    [
        pytest.param("info", "json", b'"event":"request"', id="json_info_logged"),
        pytest.param("debug", "json", b'"event":"request"', id="json_debug_logged"),
        pytest.param("warning", "json", b"", id="json_warning_silent"),
        pytest.param("info", "console", b"request", id="console_through_structlog"),
        pytest.param("error", "console", b"", id="console_error_silent"),
    ],
)
def test_fast_line_follows_the_configured_level_and_format(
    capfdbinary: pytest.CaptureFixture[bytes], level: str, fmt: str, expected: bytes
) -> None:
    configure_logging(level, fmt, cache=False)
    request_log.info("request", status=200)
    out = capfdbinary.readouterr().out
    if not expected:
        assert out == b""
        return
    assert expected in out
    assert out.startswith(b"{") == (fmt == "json")


@pytest.mark.parametrize(
    "now",
    [
        pytest.param(1764583513.0, id="whole_second_has_no_fraction"),
        pytest.param(1764583513.25, id="quarter_second"),
        pytest.param(1764583513.999999, id="last_microsecond"),
        pytest.param(1764583514.000001, id="next_second_first_microsecond"),
    ],
)
def test_timestamp_is_what_isoformat_writes(monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    monkeypatch.setattr(time, "time", lambda: now)  # the clock _timestamp reads
    moment = datetime.fromtimestamp(now, UTC)
    assert logs._timestamp() == moment.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    "bound",
    [pytest.param({"worker": 3}, id="a_worker_index"), pytest.param({}, id="nothing_bound")],
)
def test_fast_line_carries_the_bound_contextvars_as_the_chain_does(
    capfdbinary: pytest.CaptureFixture[bytes], bound: dict[str, Any]
) -> None:
    configure_logging("info", "json", cache=False)
    structlog.contextvars.bind_contextvars(**bound)
    try:
        request_log.info("request", status=200)
        get_logger("gradeproxy.request").info("request", status=200)
    finally:
        structlog.contextvars.clear_contextvars()
    fast, chain = (orjson.loads(line) for line in capfdbinary.readouterr().out.splitlines())
    assert list(fast) == list(chain)
    assert {key: fast[key] for key in bound} == bound


def _line_off_the_loop() -> None:
    request_log.info("request", status=200)


def _line_on_a_loop_that_then_stops() -> None:
    loop = asyncio.new_event_loop()
    loop.call_soon(lambda: request_log.write("request", {"status": 200}))
    loop.call_soon(loop.stop)  # no later iteration: the line must already be out
    loop.run_forever()
    loop.close()


def _two_lines_one_iteration() -> None:
    async def main() -> None:
        request_log.info("request", status=200)
        request_log.write("request", {"status": 502})

    asyncio.run(main())


@pytest.mark.parametrize(
    ("write", "lines"),
    [
        pytest.param(_line_off_the_loop, 1, id="off_the_loop"),
        pytest.param(_line_on_a_loop_that_then_stops, 1, id="on_a_loop_that_stops"),
        pytest.param(_two_lines_one_iteration, 2, id="two_lines_in_one_iteration"),
    ],
)
def test_request_lines_reach_stdout_as_they_are_written(
    tmp_path: Path, write: Callable[[], None], lines: int
) -> None:
    """Each line is flushed when written: none waits in the buffer for a later one."""
    configure_logging("info", "json", cache=False)
    stdout = tmp_path / "stdout"
    with io.BufferedWriter(io.FileIO(stdout, "w")) as buffered:  # as sys.stdout.buffer is
        request_log.configure(buffered, True, structlog.get_config()["processors"])
        try:
            write()
            flushed = stdout.read_bytes()  # the file: only what was flushed
        finally:
            configure_logging("info", "json", cache=False)
    assert flushed.count(b'"event":"request"') == lines
