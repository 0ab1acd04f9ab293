"""Result files hold whole rows or nothing, losses are counted once, and rows are readable by
other tools: a full disk, a write cut part way, a 50 MB answer, file permissions."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from grader.json import loads_exact
from proxy.pipeline.record.results import ResultsWriteError, ResultWriter
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of

ROWS = [{"n": n, "text": "Zürich " * 20} for n in range(3)]


def read(path: Path) -> list[dict[str, Any]]:
    return [loads_exact(line) for line in path.read_text().splitlines()]


def test_a_write_cut_part_way_leaves_no_torn_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "grades.jsonl"
    writer = ResultWriter(path, max_bytes=1 << 20, backups=1)
    writer.write(ROWS[:1])
    real_write = os.write
    calls = 0

    def half_then_enospc(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])  # a short write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(ResultsWriteError) as lost:
        writer.write(ROWS[1:])
    assert lost.value.rows == 2
    monkeypatch.setattr(os, "write", real_write)
    writer.write(ROWS[2:])  # the disk has room again
    writer.close()
    assert [row["n"] for row in read(path)] == [0, 2]  # whole rows only, in order


def test_a_full_disk_raises_with_the_rows_lost() -> None:
    writer = ResultWriter(Path("/dev/full"), max_bytes=1 << 40, backups=0)
    with pytest.raises(ResultsWriteError) as lost:
        writer.write(ROWS)
    assert (lost.value.rows, lost.value.errno) == (3, errno.ENOSPC)
    writer.close()


def test_result_files_are_readable_by_others(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        writer = ResultWriter(tmp_path / "grades.jsonl", max_bytes=1 << 20, backups=1)
        writer.close()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "grades.jsonl").stat().st_mode) == 0o644


async def test_a_full_disk_counts_each_lost_row_once_and_grading_goes_on(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy(results={"path": "/dev/full"})
    for _ in range(3):
        await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
    assert await rows_of(client, results_path) == []
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="results_write") == 3
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="worker") == 0
    assert metric_value(text, "gradeproxy_grading_healthy") == 1


@pytest.mark.parametrize(
    ("cap", "size", "truncated"),
    [(100, 50, False), (100, 100, False), (100, 5000, True), (0, 10, True)],
    ids=["under", "at_cap", "over", "zero_cap"],
)
async def test_the_stored_answer_is_capped_with_a_flag(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    cap: int,
    size: int,
    truncated: bool,
) -> None:
    text = "x" * size
    body = wire("vllm_text.json")
    start = body.index(b'"content":"') + len(b'"content":"')
    end = body.index(b'"', start)
    backend.replies.append(Reply(body=body[:start] + text.encode() + body[end:]))
    client = await make_proxy(results={"max_answer_chars": cap})
    await client.post(
        "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
    )
    [row] = await rows_of(client, results_path)
    assert row["truncated"] is truncated
    assert row["answer"] == text[:cap]
    assert row["reason_code"] == "no_call"  # graded on the whole answer, not the cut
