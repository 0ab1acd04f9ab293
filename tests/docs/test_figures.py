"""The README and docs/operations.md quote the same benchmark figures (one measurement, two
audiences): a figure updated in one place and not the other fails here."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
OPERATIONS = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")

FIGURES = [
    "5,973 req/s",  # graded, c=16, one core (the README table's run)
    "0.748x",  # the same as a share of the floor
    "6,526 req/s",  # graded on uvloop
    "0.853x",
    "8,326 req/s",  # forwarded only
    "1.146x",
    "8,978 req/s",  # forwarded only on uvloop
    "+487 us",  # streamed time to first byte added vs direct, graded
    "+436 us",  # the same on uvloop
    "+270 us",  # the floor's
    "267 us",  # added p50 latency at one connection, graded
    "61.1 -> 63.1 MiB",  # RSS over the 60 s soak
    "50,000–60,000",  # grades/s, typical answers
    "22,000",  # grades/s, 2 KB prose answers
]


@pytest.mark.parametrize("figure", FIGURES)
def test_both_documents_quote_the_figure(figure: str) -> None:
    assert figure in README
    assert figure in OPERATIONS
