"""answer_calls reads the same calls as sample_calls, without canonicalising; max_matching is
maximum (property tests against brute force)."""

from __future__ import annotations

import gc
import itertools
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import Sample
from grader.checks._base import sample_calls
from grader.checks.call_sets import answer_calls, max_matching
from grader.json import dumps

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
ARGUMENTS = st.one_of(
    st.dictionaries(st.text(max_size=4), VALUES, max_size=3),  # an object
    st.dictionaries(st.text(max_size=4), VALUES, max_size=3).map(lambda d: dumps(d).decode()),
    st.sampled_from(["", "null", "[1]", "{not json", '"text"', "7"]),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
FUNCTIONS = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["a", "b"]), st.none(), st.integers())},
    optional={"arguments": ARGUMENTS},
)
ELEMENTS = st.one_of(
    FUNCTIONS.map(lambda f: {"type": "function", "function": f}),
    FUNCTIONS,  # a bare {"name", "arguments"} element
)


@given(st.lists(ELEMENTS, max_size=4), st.booleans())
def test_answer_calls_read_what_sample_calls_read(elements: list[Any], as_text: bool) -> None:
    answer = dumps({"tool_calls": elements}).decode()
    sample = Sample.from_answer(answer)
    if as_text:  # the text path: extract's one call
        sample = Sample(answer, None, [], answer)
    ours = [(c.name, c.arguments) for c in answer_calls(sample)]
    theirs = [(c.name, c.arguments) for c in sample_calls(sample)]
    assert ours == theirs


def _brute_force(fits: list[list[bool]]) -> int:
    """The largest number of rows matched over every one-to-one assignment."""
    rows, cols = len(fits), len(fits[0])
    best = 0
    for perm in itertools.permutations(range(max(rows, cols))):
        best = max(best, sum(perm[r] < cols and fits[r][perm[r]] for r in range(rows)))
    return best


@given(
    st.integers(1, 5).flatmap(
        lambda n: st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=5)
    )
)
def test_max_matching_is_maximum_and_one_to_one(fits: list[list[bool]]) -> None:
    partner = max_matching(range(len(fits)), range(len(fits[0])), lambda r, c: fits[r][c])
    used = [c for c in partner if c is not None]
    assert len(used) == len(set(used))
    assert all(fits[r][c] for r, c in enumerate(partner) if c is not None)
    assert len(used) == _brute_force(fits)
    perfect = max_matching(
        range(len(fits)), range(len(fits[0])), lambda r, c: fits[r][c], perfect=True
    )
    assert (None not in perfect) == (_brute_force(fits) == len(fits))


@pytest.mark.parametrize(
    "fits",
    [
        pytest.param([[True, False], [False, True]], id="first_fit_matches_all"),
        pytest.param([[True, True], [True, False]], id="an_augmenting_path"),
        pytest.param([[True, False], [True, False]], id="a_row_no_path_reaches"),
    ],
)
def test_a_matching_with_kept_memos_asks_no_pair_twice(fits: list[list[bool]]) -> None:
    """``memos`` (one per column, keyed by the row) outlive a matching: a remembered answer
    call met again is matched from them, as it was the first time, without asking ``fit``."""
    asked: list[tuple[int, int]] = []

    def fit(row: int, col: int) -> bool:
        asked.append((row, col))
        return fits[row][col]

    memos: list[dict[int, bool]] = [{} for _ in fits[0]]
    first = max_matching(range(2), range(2), fit, True, memos)
    assert len(asked) == len(set(asked))
    again = max_matching(range(2), range(2), fit, True, memos)
    assert again == first
    assert len(asked) == len(set(asked))


class _Answer:
    """Stands for what a ``fit`` reads (an answer's calls): weakly referenceable."""

    def __init__(self, fits: list[list[bool]]) -> None:
        self.fits = fits

    def fit(self, row: int, col: int) -> bool:
        return self.fits[row][col]


@pytest.mark.parametrize(
    ("fits", "perfect"),
    [
        pytest.param([[True, False], [False, True]], False, id="first_fit_matches_all"),
        pytest.param([[True, True], [True, False]], False, id="an_augmenting_path"),
        pytest.param([[True, True], [True, False]], True, id="an_augmenting_path_perfect"),
        pytest.param([[True, False], [True, False]], True, id="a_row_no_path_reaches"),
    ],
)
def test_a_matching_frees_what_its_fit_reads_on_return(
    fits: list[list[bool]], perfect: bool
) -> None:
    """No reference cycle: the answer is freed by reference counting, not the cycle collector
    (a run of ten thousand answers otherwise kept a third of them alive between collections)."""
    answer = _Answer(fits)
    gone = weakref.ref(answer)
    collecting = gc.isenabled()
    gc.disable()
    try:
        max_matching(range(2), range(2), answer.fit, perfect=perfect)
        del answer
        assert gone() is None
    finally:
        if collecting:
            gc.enable()
