"""Project-wide test configuration: Hypothesis profiles, and the shared fixtures' plugin.

Every fixture more than one suite uses lives in :mod:`tests.support.fixtures`, registered here
once; no other conftest.py exists (tests/test_architecture.py keeps it so).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.support.fixtures", "tests.support.postgres"]

# CI machines are shared and noisy: property tests get no deadline, and more examples in CI.
# CI is derandomised: a red run names an example that reproduces on every machine, and the
# fuzzing budget is the same from run to run.
settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100
)
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=300,
    derandomize=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Captured output as text that survives pytest-xdist's transport.

    Tests feed lone surrogates on purpose (a body with a 19-digit number parsed by the stdlib),
    and libraries log them; execnet refuses to send a report whose captured log holds one, which
    turns a passing test into a crashed worker. Escaped, the text reads the same to a person.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for title, text in report.sections
    ]
