"""JSONL outputs are written a batch of lines at a time: every line once, in order."""

from __future__ import annotations

import pytest

from gradeproxy.cli._io import JSONL_BATCH, batched_lines, jsonl_bytes


@pytest.mark.parametrize(
    "count",
    [0, 1, JSONL_BATCH - 1, JSONL_BATCH, JSONL_BATCH + 1, 3 * JSONL_BATCH],
    ids=["none", "one", "a_batch_less_one", "a_batch", "a_batch_and_one", "three_batches"],
)
def test_lines_are_written_in_full_batches_then_the_rest(count: int) -> None:
    lines = [b'{"n":%d}\n' % n for n in range(count)]
    chunks = list(batched_lines(line for line in lines))
    assert b"".join(chunks) == b"".join(lines)
    whole, rest = divmod(count, JSONL_BATCH)
    assert [chunk.count(b"\n") for chunk in chunks] == [JSONL_BATCH] * whole + [rest] * bool(rest)
    assert b"".join(jsonl_bytes({"n": n} for n in range(count))) == b"".join(lines)
