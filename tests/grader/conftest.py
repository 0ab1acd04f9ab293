"""Shared tasks for the grader tables."""

from __future__ import annotations

import pytest

from grader import Task, parse_task
from tests.grader.cases import EXPECTED, STALE


@pytest.fixture(scope="session")
def ticket_task() -> Task:
    return parse_task(
        {
            "id": "tickets.field_renamed.01",
            "expected": EXPECTED,
            "metadata": {"stale": STALE, "mutationKind": "field_renamed"},
        }
    )
