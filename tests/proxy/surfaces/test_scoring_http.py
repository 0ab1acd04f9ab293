"""``POST /grading/v1/score`` on a bare aiohttp app: verdicts, batch reports, request errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from grader import load_tasks
from grader.json import dumps, loads_exact
from grader.loader import parse_task
from grader.tasks import digest_of
from grader.version import GRADER_RULES_VERSION
from proxy.errors import BadRequestError
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.state import TASKS
from proxy.surfaces.scoring_http import PREFIX, add_scoring_routes
from proxy.taskstore import TaskStore
from tests.support.rows import without_row_id
from tests.support.surfaces import (
    CHECKS_ONLY_TASK,
    FORECAST,
    FORECAST_STALE,
    TASKS_BY_ID,
    write_tasks,
)

Client = TestClient[web.Request, web.Application]
SCORE = f"{PREFIX}/score"
W = "weather.enum_value_changed.01"
T = "tickets.field_renamed.01"
MAX_BATCH = 4


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl")


def scoring_app(
    store: TaskStore | None, *, max_batch: int = MAX_BATCH, **kw: Any
) -> web.Application:
    app = web.Application(**kw)
    if store is not None:
        app[TASKS] = store
    add_scoring_routes(app, max_batch=max_batch)
    return app


@pytest.fixture
async def store(tasks_file: Path) -> TaskStore:
    store = TaskStore(tasks_file, ProxyMetrics())
    assert await store.reload()
    return store


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, store: TaskStore) -> Client:
    return await aiohttp_client(scoring_app(store))


async def post(client: Client, body: Any, path: str = SCORE) -> tuple[int, Any]:
    raw = body if isinstance(body, bytes) else dumps(body)
    response = await client.post(path, data=raw, headers={"Content-Type": "application/json"})
    return response.status, loads_exact(await response.text())


async def test_single_answer_by_task_id_returns_its_verdict_row(
    client: Client, tasks_file: Path
) -> None:
    status, body = await post(client, {"task_id": W, "answer": dumps(FORECAST_STALE).decode()})
    assert status == 200
    tasks = load_tasks(tasks_file)
    digest = tasks.tasks[W].checks[0].digest
    assert without_row_id(body) == {
        "verdict": {
            "kind": "answer",
            "row_schema_version": 3,
            "task_id": W,
            "mutationKind": "enum_value_changed",
            "result": "stale",
            "passed": False,
            "staleSchemaUsed": True,
            "score": 0,
            "reason": "staleSchemaUsed: the call matches the pre-migration schema",
            "reason_code": "stale_schema",
            "path": None,
            "call": FORECAST_STALE,
            "checks": [
                {
                    "name": "tool_call",
                    "type": "tool_call",
                    "passed": False,
                    "score": None,
                    "reason": "staleSchemaUsed: the call matches the pre-migration schema",
                    "reason_code": "stale_schema",
                    "error": None,
                    "digest": digest,
                    "details": {"path": None, "staleSchemaUsed": True},
                }
            ],
            "warnings": [],
            "tasks_digest": tasks.digest,
            "grader_rules_version": GRADER_RULES_VERSION,
        }
    }


async def test_inline_task_is_graded_and_stamped_with_its_own_digest(client: Client) -> None:
    """A task sent inline needs no task set; the row's digest names that one definition."""
    task = {"id": "inline.1", "expected": FORECAST, "metadata": {"mutationKind": "k"}}
    status, body = await post(client, {"task": task, "answer": dumps(FORECAST).decode()})
    assert status == 200
    assert (body["verdict"]["score"], body["verdict"]["mutationKind"]) == (1, "k")
    assert body["verdict"]["tasks_digest"] == digest_of([parse_task(task)])


async def test_batch_returns_rows_in_order_and_the_run_report(
    client: Client, tasks_file: Path
) -> None:
    items = [
        {"task_id": W, "answer": dumps(FORECAST).decode()},
        {"task_id": W, "answer": dumps(FORECAST_STALE).decode()},
        {"task_id": T, "answer": "no call here"},
    ]
    status, body = await post(client, {"items": items})
    assert status == 200
    assert [row["reason_code"] for row in body["results"]] == ["match", "stale_schema", "no_call"]
    report = body["report"]
    assert (report["n"], report["passed"], report["staleSchemaUsed"]) == (3, 1, 1)
    assert report["staleSchemaUsedRate"] == pytest.approx(1 / 3)
    assert report["perMutationKind"]["enum_value_changed"]["staleSchemaUsedRate"] == 0.5
    assert report["perMutationKind"]["field_renamed"]["passRate"] == 0.0
    assert report["tasks_digest"] == load_tasks(tasks_file).digest


async def test_batch_mixing_inline_tasks_reports_the_digest_of_what_it_used(
    client: Client,
) -> None:
    inline = {"id": "inline.1", "expected": FORECAST}
    items = [{"task_id": W, "answer": "x"}, {"task": inline, "answer": "x"}]
    status, body = await post(client, {"items": items})
    assert status == 200
    used = [parse_task(TASKS_BY_ID[W]), parse_task(inline)]
    assert body["report"]["tasks_digest"] == digest_of(used)


async def test_empty_batch_is_an_empty_run(client: Client) -> None:
    status, body = await post(client, {"items": []})
    assert status == 200
    assert body["results"] == []
    assert (body["report"]["n"], body["report"]["passRate"]) == (0, None)


async def test_batch_at_the_limit_is_graded(client: Client) -> None:
    status, body = await post(client, {"items": [{"task_id": W, "answer": "x"}] * MAX_BATCH})
    assert (status, len(body["results"])) == (200, MAX_BATCH)


GOOD = {"task_id": W, "answer": "x"}


@pytest.mark.parametrize(
    ("body", "code", "param", "message"),
    [
        pytest.param(b"{not json", "invalid_json", None, "not valid JSON", id="malformed_json"),
        pytest.param(b"", "invalid_json", None, "not valid JSON", id="empty_body"),
        pytest.param(b"\xff\xfe{}", "invalid_json", None, "not UTF-8", id="not_utf8"),
        pytest.param([GOOD], "invalid_type", None, "must be a JSON object", id="body_is_an_array"),
        pytest.param(
            {"task_id": W}, "missing_required_parameter", "answer", "'answer'", id="no_answer"
        ),
        pytest.param(
            {"answer": "x"}, "missing_required_parameter", "task_id", "'task_id'", id="no_task"
        ),
        pytest.param(
            {"task_id": W, "answer": None},
            "invalid_type",
            "answer",
            "'answer' must be a string (the raw model output), not null",
            id="null_answer",
        ),
        pytest.param(
            {"task_id": W, "answer": FORECAST},
            "invalid_type",
            "answer",
            "not an object",
            id="object_answer",
        ),
        pytest.param(
            {"task_id": W, "answer": 4550}, "invalid_type", "answer", "a number", id="number_answer"
        ),
        pytest.param(
            {"task_id": 7, "answer": "x"},
            "invalid_type",
            "task_id",
            "a number",
            id="task_id_number",
        ),
        pytest.param(
            {"task_id": "no.such", "answer": "x"},
            "unknown_task",
            "task_id",
            "unknown task id 'no.such'",
            id="unknown_task",
        ),
        pytest.param(
            {"task_id": W, "task": TASKS_BY_ID[W], "answer": "x"},
            "invalid_value",
            "task",
            "not both",
            id="task_id_and_task",
        ),
        pytest.param(
            {"task": {"id": "bad"}, "answer": "x"},
            "invalid_task",
            "task",
            "task: task 'bad' has no 'expected' call",
            id="invalid_inline_task",
        ),
        pytest.param(
            {"task_id": W, "answer": "x", "tools": {"type": "function"}},
            "invalid_type",
            "tools",
            "'tools' must be an array of tool definitions, not an object",
            id="tools_not_an_array",
        ),
        pytest.param(
            {"items": GOOD}, "invalid_type", "items", "'items' must be an array", id="items_object"
        ),
        pytest.param(
            {"items": [GOOD] * (MAX_BATCH + 1)},
            "batch_too_large",
            "items",
            f"holds {MAX_BATCH + 1} items; this server grades at most {MAX_BATCH}",
            id="batch_over_max",
        ),
        pytest.param(
            {"items": [GOOD, {"task_id": W, "answer": None}]},
            "invalid_type",
            "items[1].answer",
            "'items[1].answer' must be a string",
            id="batch_item_null_answer",
        ),
        pytest.param(
            {"items": [GOOD, GOOD, {"task_id": "no.such", "answer": "x"}]},
            "unknown_task",
            "items[2].task_id",
            "unknown task id 'no.such'",
            id="batch_item_unknown_task",
        ),
        pytest.param(
            {"items": [GOOD, "x"]}, "invalid_type", "items[1]", "not a string", id="batch_item_str"
        ),
        pytest.param(
            {"items": [GOOD], "answer": "x"},
            "invalid_value",
            "answer",
            "either one item or 'items'",
            id="batch_and_single",
        ),
    ],
)
async def test_request_errors_name_the_field(
    client: Client, body: Any, code: str, param: str | None, message: str
) -> None:
    """Every bad request is a 400 in OpenAI's error shape; nothing in it is graded."""
    status, error = await post(client, body)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert (error["error"]["code"], error["error"]["param"]) == (code, param)
    assert message in error["error"]["message"]


async def test_errors_carry_openai_headers_and_echo_the_request_id(client: Client) -> None:
    response = await client.post(SCORE, data=b"[", headers={"x-request-id": "req-42"})
    assert response.status == 400
    assert response.headers["x-request-id"] == "req-42"
    assert response.headers["x-should-retry"] == "false"
    assert response.content_type == "application/json"


async def test_success_echoes_the_request_id(client: Client) -> None:
    response = await client.post(SCORE, data=dumps(GOOD), headers={"x-request-id": "req-7"})
    assert (response.status, response.headers["x-request-id"]) == (200, "req-7")


async def test_task_id_while_the_task_set_is_loading_is_a_retryable_503(
    aiohttp_client: AiohttpClient, tasks_file: Path
) -> None:
    loading = TaskStore(tasks_file, ProxyMetrics())  # not reloaded yet: current is None
    client = await aiohttp_client(scoring_app(loading))
    response = await client.post(SCORE, data=dumps(GOOD))
    body = loads_exact(await response.text())
    assert response.status == 503
    assert body["error"]["code"] == "tasks_not_loaded"
    assert (response.headers["x-should-retry"], response.headers["Retry-After"]) == ("true", "1")
    inline = {"task": TASKS_BY_ID[W], "answer": "x"}
    assert (await client.post(SCORE, data=dumps(inline))).status == 200


@pytest.mark.parametrize(
    "store_path",
    [pytest.param(False, id="no_task_store_on_app"), pytest.param(True, id="no_tasks_configured")],
)
async def test_task_id_without_a_task_set_asks_for_an_inline_task(
    aiohttp_client: AiohttpClient, store_path: bool
) -> None:
    store = TaskStore(None, ProxyMetrics()) if store_path else None
    client = await aiohttp_client(scoring_app(store))
    status, body = await post(client, GOOD)
    assert status == 400
    assert (body["error"]["code"], body["error"]["param"]) == ("no_task_set", "task_id")
    assert "inline as 'task'" in body["error"]["message"]


async def test_body_over_the_size_limit_is_a_413_in_openai_shape(
    aiohttp_client: AiohttpClient, store: TaskStore
) -> None:
    client = await aiohttp_client(scoring_app(store, client_max_size=1024))
    status, body = await post(client, {"task_id": W, "answer": "x" * 2048})
    assert status == 413
    assert body["error"]["code"] == "request_too_large"


def test_routes_live_under_the_grading_prefix_only() -> None:
    """/v1/* belongs to the upstream: no scoring route may shadow a forwarded path."""
    app = scoring_app(None)
    paths = {route.resource.canonical for route in app.router.routes() if route.resource}
    assert paths == {
        "/grading/v1/score",
        "/grading/v1/graders/run",
        "/grading/v1/graders/validate",
        "/grading/v1/fine_tuning/alpha/graders/run",
        "/grading/v1/fine_tuning/alpha/graders/validate",
    }


@pytest.mark.parametrize("max_batch", [0, -1])
def test_max_batch_below_one_is_a_configuration_error(max_batch: int) -> None:
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        add_scoring_routes(web.Application(), max_batch=max_batch)


def test_bad_request_error_renders_param_and_code() -> None:
    error = BadRequestError("nope", param="items[0].answer", code="invalid_type")
    assert error.status == 400
    assert error.body() == {
        "error": {
            "message": "nope",
            "type": "invalid_request_error",
            "param": "items[0].answer",
            "code": "invalid_type",
        }
    }


@pytest.mark.parametrize(("answer", "result"), [("BILLING", "pass"), ("BILLING\n", "fail")])
async def test_checks_only_task_is_graded_on_its_checks(
    client: Client, answer: str, result: str
) -> None:
    """A task with no expected call is no request error: its checks are its verdict."""
    status, body = await post(client, {"task": CHECKS_ONLY_TASK, "answer": answer})
    assert status == 200
    row = body["verdict"]
    assert (row["result"], [c["name"] for c in row["checks"]]) == (result, ["route"])
    assert "score" not in row
    assert "reason_code" not in row
