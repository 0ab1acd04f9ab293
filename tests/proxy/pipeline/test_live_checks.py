"""Checks on live traffic: one column per check in each row and in the metrics, judge checks
through a real (fake) judge endpoint, infrastructure errors kept out of pass rates, grader
digests exported, and the scoring routes switched on by config."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from grader.json import dumps
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.judge import judge_app
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import CHECKED, POLITE_JUDGE

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius"]},
                },
                "required": ["city", "unit"],
                "additionalProperties": False,
            },
        },
    }
]
UNRESOLVED = {
    "id": "weather.unresolved",
    "checks": [
        {
            "type": "string_check",
            "name": "needs_item",
            "operation": "eq",
            "input": "{{ sample.output_text }}",
            "reference": "{{ item.missing_field }}",
        }
    ],
    "metadata": {"mutationKind": "none"},
}
JUDGED: dict[str, Any] = {
    "id": "reply.judged",
    "prompt": "Reply to a customer asking about the weather.",
    "checks": [POLITE_JUDGE],
    "metadata": {"mutationKind": "judge"},
}


@pytest.fixture
async def checked_tasks(tasks_file: Path) -> Path:
    lines = [dumps(task) for task in (CHECKED, UNRESOLVED, JUDGED)]
    await asyncio.to_thread(tasks_file.write_bytes, b"\n".join(lines) + b"\n")
    return tasks_file


async def post(client: Any, task: str, tools: list[Any] | None = None) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    if tools is not None:
        body["tools"] = tools
    response = await client.post(
        "/v1/chat/completions", data=dumps(body), headers={"X-Grade-Task": task}
    )
    await response.read()


@pytest.mark.parametrize(
    ("body", "result", "columns"),
    [
        pytest.param(
            wire("openai_single_tool.json"),
            "pass",
            {"call": True, "city_exact": True, "schema": True},
            id="all_columns_pass",
        ),
        pytest.param(
            wire("openai_single_tool.json").replace(
                b'\\"unit\\":\\"celsius\\"', b'\\"units\\":\\"C\\"'
            ),
            "stale",
            {"call": False, "city_exact": True, "schema": False},
            id="stale_call",
        ),
        pytest.param(
            wire("openai_text.json"),
            "fail",
            {"call": False, "city_exact": False, "schema": False},
            id="prose_has_no_call_so_the_sample_template_fails",
        ),
    ],
)
async def test_one_column_per_check(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    checked_tasks: Path,
    results_path: Path,
    body: bytes,
    result: str,
    columns: dict[str, bool | None],
) -> None:
    backend.replies.append(Reply(body=body))
    client = await make_proxy()
    await post(client, "weather.checked", WEATHER_TOOLS)
    [row] = await rows_of(client, results_path)
    assert {c["name"]: c["passed"] for c in row["checks"]} == columns
    assert row["result"] == result
    assert all(c["digest"].startswith("sha256:") or len(c["digest"]) >= 32 for c in row["checks"])
    metrics = await (await client.get("/metrics")).text()
    for name, passed in columns.items():
        label = "error" if passed is None else "pass" if passed else "fail"
        assert (
            metric_value(
                metrics,
                "gradeproxy_check_results_total",
                task="weather.checked",
                check=name,
                result=label,
                variant="primary",
            )
            == 1
        )
    graded = metric_value(metrics, "gradeproxy_grades_total", task="weather.checked")
    assert graded == (0 if result == "error" else 1)  # an infrastructure error is no model failure
    assert metric_value(metrics, "gradeproxy_grading_errors_total", kind="check") == (
        result == "error"
    )


async def test_unresolved_template_is_an_infrastructure_error(
    make_proxy: ProxyFactory, backend: ScriptedBackend, checked_tasks: Path, results_path: Path
) -> None:
    backend.replies.append(Reply(body=wire("openai_text.json")))
    client = await make_proxy()
    await post(client, "weather.unresolved")
    [row] = await rows_of(client, results_path)
    assert (row["result"], row["passed"]) == ("error", None)
    assert "score" not in row  # a task with checks: tool-call fields live in their column
    metrics = await (await client.get("/metrics")).text()
    assert metric_value(metrics, "gradeproxy_grades_total") == 0
    assert (
        metric_value(metrics, "gradeproxy_check_results_total", check="needs_item", result="error")
        == 1
    )


async def test_error_rows_are_counted_per_task_and_shown_with_their_rate(
    make_proxy: ProxyFactory, backend: ScriptedBackend, checked_tasks: Path, results_path: Path
) -> None:
    """Error rows stay out of gradeproxy_grades_total but have a counter of their own, and the
    scoreboard's error rate is over all of a task's rows."""
    backend.replies.extend(Reply(body=wire("openai_text.json")) for _ in range(2))
    backend.replies.append(Reply(body=wire("openai_single_tool.json")))
    client = await make_proxy()
    await post(client, "weather.unresolved")
    await post(client, "weather.unresolved")
    await post(client, "weather.checked", WEATHER_TOOLS)
    rows = await rows_of(client, results_path)
    assert sorted(r["result"] for r in rows) == ["error", "error", "pass"]
    metrics = await (await client.get("/metrics")).text()
    errors = {
        task: metric_value(metrics, "gradeproxy_grade_errors_total", task=task, variant="primary")
        for task in ("weather.unresolved", "weather.checked")
    }
    assert errors == {"weather.unresolved": 2, "weather.checked": 0}
    board = await (await client.get("/ui/scoreboard.json")).json()
    shown = {
        t["task"]: (t["graded"], t["error"], t["rows"], t["error_rate"]) for t in board["tasks"]
    }
    assert shown == {"weather.unresolved": (0, 2, 2, 1.0), "weather.checked": (1, 0, 1, 0.0)}


async def test_grader_info_exports_every_check_digest(
    make_proxy: ProxyFactory, checked_tasks: Path
) -> None:
    client = await make_proxy()
    metrics = await (await client.get("/metrics")).text()
    for check in ("call", "city_exact", "schema"):
        assert (
            metric_value(metrics, "gradeproxy_grader_info", task="weather.checked", check=check)
            == 1
        )
    assert metric_value(metrics, "gradeproxy_grader_info", task="reply.judged", check="polite") == 1


@pytest.mark.parametrize(
    ("replies", "result", "code"),
    [
        pytest.param(["PASS"], "pass", None, id="pass"),
        pytest.param(["FAIL"], "fail", None, id="fail"),
        pytest.param(["pass", "PASS"], "pass", None, id="parse_error_then_retry"),
        pytest.param(
            ["Maybe", "PASS.", "sure"],
            "error",
            "judge_parse_error",
            id="never_parses_is_not_a_fail",
        ),
    ],
)
async def test_judge_checks_on_live_traffic(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    checked_tasks: Path,
    results_path: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    replies: list[str],
    result: str,
    code: str | None,
) -> None:
    seen: list[Any] = []
    judge = await aiohttp_server(judge_app(list(replies), seen))
    backend.replies.append(Reply(body=wire("openai_text.json")))
    client = await make_proxy(judge={"endpoint": str(judge.make_url("/v1")), "retries": 2})
    await post(client, "reply.judged")
    [row] = await rows_of(client, results_path)
    assert row["result"] == result
    [column] = row["checks"]
    if code is not None:
        assert column["reason_code"] == code
    assert seen[0]["model"] == "judge-model-2024-08-06"
    assert seen[0]["temperature"] == 0
    assert "It’s 12°C and sunny in Zürich." in dumps(seen[0]["messages"]).decode()


async def test_judge_checks_without_a_judge_are_errors(
    make_proxy: ProxyFactory, backend: ScriptedBackend, checked_tasks: Path, results_path: Path
) -> None:
    backend.replies.append(Reply(body=wire("openai_text.json")))
    client = await make_proxy()
    await post(client, "reply.judged")
    [row] = await rows_of(client, results_path)
    assert row["result"] == "error"


@pytest.mark.parametrize(("enabled", "status"), [(True, 200), (False, 404)])
async def test_scoring_routes_follow_config(
    make_proxy: ProxyFactory, checked_tasks: Path, enabled: bool, status: int
) -> None:
    client = await make_proxy(scoring={"enabled": enabled})
    call = {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
    answer = dumps({"tool_calls": [{"type": "function", "function": call}]}).decode()
    body = {"task_id": "weather.checked", "answer": answer, "tools": WEATHER_TOOLS}
    response = await client.post("/grading/v1/score", json=body)
    assert response.status == status
    if enabled:
        verdict = (await response.json())["verdict"]
        assert verdict["result"] == "pass"
        assert [c["passed"] for c in verdict["checks"]] == [True, True, True]


@pytest.mark.parametrize(("reply", "reward"), [("PASS", 1.0), ("FAIL", 0.0)])
async def test_graders_run_uses_the_proxys_judge(
    make_proxy: ProxyFactory,
    checked_tasks: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    reply: str,
    reward: float,
) -> None:
    """/grading/v1/graders/run grades a judge grader with the judge the proxy is configured with."""
    seen: list[Any] = []
    judge = await aiohttp_server(judge_app([reply], seen))
    client = await make_proxy(
        scoring={"enabled": True}, judge={"endpoint": str(judge.make_url("/v1"))}
    )
    grader = JUDGED["checks"][0]
    item = {"prompt": JUDGED["prompt"]}
    body = {"grader": grader, "model_sample": "Thank you for asking!", "item": item}
    response = await client.post("/grading/v1/graders/run", data=dumps(body))
    result = await response.json()
    assert (response.status, result["reward"]) == (200, reward), result["gradeproxy"]
    assert result["gradeproxy"]["passed"] is (reward == 1.0)
    assert seen[0]["model"] == "judge-model-2024-08-06"
