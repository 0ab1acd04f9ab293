"""Admission, the pipeline's first stage: which requests are graded, and the reason for the rest.

A table of real requests (method, path, headers) against a loaded task set; the skip reasons
are the metric contract's label values, one closed set.
"""

from __future__ import annotations

from typing import get_args

import pytest

from grader.loader import parse_task
from grader.tasks import TaskSet
from proxy.config import Grading
from proxy.pipeline.admit import SKIP_REASONS, Route, SkipReason, admit, sampled
from proxy.pipeline.episodes import EpisodeSkip
from proxy.pipeline.record.metrics import ProxyMetrics

TASK = parse_task(
    {
        "id": "weather",
        "prompt": "Weather in Paris?",
        "expected": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
)
TASKS = TaskSet({TASK.id: TASK}, "sha256:test")
CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
NAMED = {"X-Grade-Task": "weather"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "tasks", "grading", "route", "skip", "task_id"),
    [
        pytest.param("POST", CHAT, NAMED, TASKS, Grading(), "chat_completions", None, "weather",
                     id="chat-naming-a-loaded-task-is-graded"),
        pytest.param("POST", RESPONSES, NAMED, TASKS, Grading(), "responses", None, "weather",
                     id="responses-naming-a-loaded-task-is-graded"),
        pytest.param("POST", CHAT, {}, TASKS, Grading(), "chat_completions", "no_task_header",
                     None, id="no-task-header"),
        pytest.param("POST", CHAT, {"X-Grade-Task": ""}, TASKS, Grading(), "chat_completions",
                     "no_task_header", "", id="empty-task-header"),
        pytest.param("POST", CHAT, {"X-Grade-Task": "nope"}, TASKS, Grading(),
                     "chat_completions", "unknown_task", "nope", id="unknown-task"),
        pytest.param("POST", CHAT, NAMED, None, Grading(), "chat_completions", "unknown_task",
                     "weather", id="tasks-not-loaded-yet"),
        pytest.param("POST", CHAT, NAMED, TASKS, Grading(sample_rate=0.0), "chat_completions",
                     "sampled_out", "weather", id="sampled-out"),
        pytest.param("GET", CHAT, NAMED, TASKS, Grading(), "other", "unsupported_route",
                     "weather", id="task-named-on-a-get"),
        pytest.param("POST", "/v1/embeddings", NAMED, TASKS, Grading(), "other",
                     "unsupported_route", "weather", id="task-named-on-an-ungraded-route"),
        pytest.param("GET", "/v1/models", {}, TASKS, Grading(), "other", None, None,
                     id="plain-forwarding-is-no-skip"),
        pytest.param("POST", CHAT, {"X-Task": "weather"}, TASKS, Grading(task_header="X-Task"),
                     "chat_completions", None, "weather", id="configured-task-header"),
    ],
)  # fmt: skip
def test_admission(
    method: str,
    path: str,
    headers: dict[str, str],
    tasks: TaskSet | None,
    grading: Grading,
    route: Route,
    skip: SkipReason | None,
    task_id: str | None,
) -> None:
    admitted = admit(method, path, headers, grading, tasks, "req-1")
    assert (admitted.route, admitted.skip, admitted.task_id) == (route, skip, task_id)
    assert admitted.capturing is (skip is None and route != "other")


@pytest.mark.parametrize(
    ("headers", "grading", "key"),
    [
        pytest.param({}, Grading(), "req-1", id="request-id-by-default"),
        pytest.param({"X-Conv": "c-9"}, Grading(sampling_header="X-Conv"), "c-9",
                     id="the-sampling-header-when-sent"),
        pytest.param({}, Grading(sampling_header="X-Conv"), "req-1",
                     id="request-id-when-the-header-is-absent"),
    ],
)  # fmt: skip
def test_one_sampling_key_for_grading_and_shadows(
    headers: dict[str, str], grading: Grading, key: str
) -> None:
    admitted = admit("POST", CHAT, {**NAMED, **headers}, grading, TASKS, "req-1")
    assert admitted.key == key
    assert (admitted.skip is None) is sampled(key, grading.sample_rate)


@pytest.mark.parametrize(
    ("method", "path", "headers", "counted"),
    [
        pytest.param("POST", CHAT, NAMED, "upstream_error", id="graded-skips-with-the-reason"),
        pytest.param("POST", CHAT, {}, "no_task_header", id="its-own-skip-comes-first"),
        pytest.param("GET", CHAT, NAMED, "unsupported_route", id="a-task-on-another-route"),
        pytest.param("GET", "/v1/models", {}, None, id="plain-forwarding-counts-no-skip"),
    ],
)  # fmt: skip
def test_a_failed_relay_counts_one_skip(
    method: str, path: str, headers: dict[str, str], counted: SkipReason | None
) -> None:
    admitted = admit(method, path, headers, Grading(), TASKS, "req-1")
    assert admitted.failed("upstream_error") == counted
    assert admitted.skip == counted


def test_the_metric_contract_exports_every_skip_reason_at_zero() -> None:
    metrics = ProxyMetrics()
    exported = {
        sample.labels["reason"]
        for family in metrics.registry.collect()
        if family.name == "gradeproxy_grading_skipped"
        for sample in family.samples
    }
    assert exported == set(SKIP_REASONS) == set(get_args(SkipReason))


def test_episode_skips_are_skip_reasons() -> None:
    assert set(get_args(EpisodeSkip)) <= set(SKIP_REASONS)
