"""Project-wide test configuration."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
