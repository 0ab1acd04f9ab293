"""The README and docs/operations.md quote the same benchmark figures (one measurement, two
audiences): a figure updated in one place and not the other fails here."""

from __future__ import annotations

import pytest

from tests.support.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
OPERATIONS = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")

FIGURES = [
    "2,700–3,150",  # req/s, every response graded and logged
    "0.46–0.51x",  # the same as a share of a bare pass-through
    "3,400–4,300",  # req/s, forwarded only
    "0.55–0.69x",
    "+0.67 to +1.05 ms",  # streamed time to first byte vs direct
    "+0.48 to +0.93 ms",  # the pass-through's
    "1.05–1.54x",  # added p50 latency at one connection
    "50,000–60,000",  # grades/s, typical answers
    "22,000",  # grades/s, 2 KB prose answers
]


@pytest.mark.parametrize("figure", FIGURES)
def test_both_documents_quote_the_figure(figure: str) -> None:
    assert figure in README
    assert figure in OPERATIONS
