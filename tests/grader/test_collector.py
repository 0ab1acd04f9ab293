"""``grading_collector``: the young threshold raised while many answers are graded, the
process's own thresholds back after, and a caller's own choice left alone."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import pytest

from grader.collector import GC_YOUNG_THRESHOLD, grading_collector


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.parametrize(
    ("process", "inside"),
    [
        pytest.param((700, 10, 10), (GC_YOUNG_THRESHOLD, 10, 10), id="cpython_default_raised"),
        pytest.param((2000, 5, 20), (GC_YOUNG_THRESHOLD, 5, 20), id="older_generations_kept"),
        pytest.param((50_000, 10, 10), (50_000, 10, 10), id="higher_threshold_left_alone"),
        pytest.param((0, 10, 10), (0, 10, 10), id="automatic_collection_off_left_off"),
    ],
)
@pytest.mark.parametrize("raises", [False, True], ids=["block_returns", "block_raises"])
def test_threshold_raised_inside_and_put_back_after(
    thresholds: None, process: tuple[int, int, int], inside: tuple[int, int, int], raises: bool
) -> None:
    gc.set_threshold(*process)
    seen: list[tuple[int, int, int]] = []
    expected = pytest.raises(RuntimeError) if raises else contextlib.nullcontext()
    with expected, grading_collector():
        seen.append(gc.get_threshold())
        if raises:
            raise RuntimeError("a grading error")
    assert seen == [inside]
    assert gc.get_threshold() == process
