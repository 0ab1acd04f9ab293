"""``gradeproxy tasks draft`` and ``tasks promote``: capture and failing rows grouped into task
drafts, the loader refusing a draft, reviewed drafts promoted to tasks ``validate-tasks``
accepts; the main paths run as processes, the rest as tables of real cases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.capture import capture_row, prompt_hash, tools_hash
from grader.json import dumps, loads_exact
from grader.loader import load_tasks
from grader.tasks import TaskLoadError
from tests.support.paths import REPO
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.tasks import TASK_LINES

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]
ZURICH = {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
BERN = {"name": "get_weather", "arguments": {"city": "Bern", "unit": "celsius"}}
OLD = {"name": "get_weather", "arguments": {"city": "Zürich", "units": "C"}}
ASK = [{"role": "user", "content": "Weather in Zürich?"}]


def envelope(*calls: dict[str, Any], raw: str | None = None) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": raw if raw is not None else dumps(c["arguments"]).decode(),
                },
            }
            for n, c in enumerate(calls)
        ]
    }


def capture(
    answer: Any = None,
    *,
    prompt: Any = ASK,
    model: str = "gpt-4.1-mini",
    route: str = "chat_completions",
    time: str = "2026-12-04T10:00:00.000000Z",
    request_id: str = "r",
    mode: str = "keep",
) -> dict[str, Any]:
    """A capture row as the proxy writes it (the real builder)."""
    answer = envelope(ZURICH) if answer is None else answer
    text = answer if isinstance(answer, str) else dumps(answer).decode()
    key = "input" if route == "responses" else "messages"
    return capture_row(
        request={"model": model, key: prompt, "tools": TOOLS},
        route=route,
        answer=answer,
        text=text,
        mode=mode,  # type: ignore[arg-type]
        max_answer_chars=65536,
        live={"request_id": request_id, "time": time, "model": model, "stream": False},
        choice=0,
    )


def graded(result: str, call: dict[str, Any], task_id: str = "weather.single") -> dict[str, Any]:
    """A failing graded row's fields that drafting reads (a live row has many more)."""
    return {
        "kind": "answer",
        "row_schema_version": 3,
        "row_id": f"00000000-0000-4000-8000-{abs(hash((result, dumps(call)))) % 10**12:012d}",
        "task_id": task_id,
        "result": result,
        "staleSchemaUsed": result == "stale",
        "call": call,
        "model": "gpt-4.1-mini",
        "time": "2026-12-04T11:00:00.000000Z",
    }


def with_field(row: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**row, key: value}


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else dumps(r)) + b"\n" for r in rows))
    return path


def read(path: Path) -> list[dict[str, Any]]:
    return [loads_exact(line) for line in path.read_text().splitlines() if line.strip()]


def draft(tmp_path: Path, rows: list[Any], *extra: str) -> tuple[int, list[dict[str, Any]]]:
    source = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "drafts" / "drafts.jsonl"
    code = main(["tasks", "draft", "--from", str(source), "--out", str(out), *extra])
    return code, read(out) if out.exists() else []


GROUP_ID = f"draft.{tools_hash(TOOLS)[:8]}.{prompt_hash(ASK)[:8]}"


@pytest.mark.parametrize(
    ("rows", "filters", "expected", "stale", "count", "code"),
    [
        pytest.param(
            [
                capture(request_id="a"),
                capture(prompt=[{"content": "Weather in Zürich?", "role": "user"}], request_id="b"),
            ],
            [],
            ZURICH,
            None,
            2,
            0,
            id="same_prompt_in_another_key_order_is_one_draft",
        ),
        pytest.param(
            [
                capture(envelope(BERN), request_id="a"),
                capture(request_id="b"),
                capture(request_id="c"),
            ],
            [],
            ZURICH,
            None,
            3,
            0,
            id="most_frequent_call_is_expected",
        ),
        pytest.param(
            [capture(envelope(BERN), request_id="a"), capture(request_id="b")],
            [],
            BERN,
            None,
            2,
            0,
            id="a_tie_goes_to_the_first_seen",
        ),
        pytest.param(
            [capture(mode="hash"), capture(mode="drop", request_id="b")],
            [],
            ZURICH,
            None,
            2,
            0,
            id="hashed_and_dropped_answers_still_show_their_calls",
        ),
        pytest.param(
            [
                capture(),
                b"{cut off",
                ["not", "a", "row"],
                with_field(capture(request_id="x"), "prompt_hash", 7),
            ],
            [],
            ZURICH,
            None,
            1,
            1,
            id="bad_rows_are_counted_not_a_refused_file",
        ),
    ],
)
def test_captures_group_into_one_draft(
    tmp_path: Path,
    rows: list[Any],
    filters: list[str],
    expected: dict[str, Any],
    stale: dict[str, Any] | None,
    count: int,
    code: int,
) -> None:
    exit_code, drafts = draft(tmp_path, rows, *filters)
    assert exit_code == code
    [only] = drafts
    assert (only["id"], only["status"], only["expected"], only["tools"]) == (
        GROUP_ID,
        "draft",
        expected,
        TOOLS,
    )
    assert only["metadata"].get("stale") == stale
    provenance = only["metadata"]["draft"]
    assert provenance["count"] == count == len(provenance["rows"])
    assert (provenance["prompt_hash"], provenance["tools_hash"]) == (
        prompt_hash(ASK),
        tools_hash(TOOLS),
    )
    assert sum(c["count"] for c in provenance["candidates"]) == count


@pytest.mark.parametrize(
    ("rows", "filters", "drafted", "printed"),
    [
        pytest.param([capture("I cannot call tools.")], [], 0, "no_call 1", id="text_answer"),
        pytest.param(
            [capture(envelope(ZURICH, BERN))], [], 0, "several_calls 1", id="parallel_calls"
        ),
        pytest.param(
            [capture(envelope(ZURICH, raw="{not json"))],
            [],
            0,
            "unusable_call 1",
            id="arguments_not_json",
        ),
        pytest.param([graded("pass", ZURICH)], [], 0, "not_a_candidate 1", id="passing_row"),
        pytest.param([graded("stale", OLD)], [], 0, "only_stale 1", id="only_stale_calls"),
        pytest.param(
            [capture(), graded("fail", BERN)],
            ["--filter", "kind=failing"],
            1,
            "filtered 1",
            id="kind_failing",
        ),
        pytest.param(
            [capture(), graded("fail", BERN)],
            ["--filter", "kind=capture"],
            1,
            "filtered 1",
            id="kind_capture",
        ),
        pytest.param(
            [capture(), capture(model="other", request_id="b")],
            ["--filter", "model=other"],
            1,
            "filtered 1",
            id="model",
        ),
        pytest.param(
            [capture(), capture(route="responses", request_id="b")],
            ["--filter", "route=responses"],
            1,
            "filtered 1",
            id="route",
        ),
        pytest.param(
            [
                capture(time="2026-12-03T23:59:59Z"),
                capture(time="2026-12-04T00:00:00Z", request_id="b"),
            ],
            ["--filter", "since=2026-12-04"],
            1,
            "filtered 1",
            id="since",
        ),
    ],
)
def test_rows_that_make_no_draft_are_counted_by_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: list[Any],
    filters: list[str],
    drafted: int,
    printed: str,
) -> None:
    exit_code, drafts = draft(tmp_path, rows, *filters)
    assert (exit_code, len(drafts)) == (0, drafted)
    assert f"rows not drafted: {printed}" in capsys.readouterr().out


def test_failing_rows_draft_with_the_stale_call_as_candidate(tmp_path: Path) -> None:
    rows = [graded("fail", BERN), graded("stale", OLD), graded("fail", BERN), graded("stale", OLD)]
    exit_code, [only] = draft(tmp_path, rows)
    assert exit_code == 0
    assert (only["expected"], only["metadata"]["stale"]) == (BERN, OLD)
    assert (
        only["id"]
        == f"draft.{tools_hash(None)[:8]}.{prompt_hash({'task_id': 'weather.single'})[:8]}"
    )
    assert only["metadata"]["draft"]["tasks"] == ["weather.single"]
    assert only["metadata"]["draft"]["count"] == 4


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        pytest.param(["--filter", "kind=passing"], "kinds are capture, failing", id="unknown_kind"),
        pytest.param(["--filter", "colour=red"], "KEY is one of", id="unknown_key"),
        pytest.param(["--filter", "since=yesterday"], "not an ISO 8601", id="bad_since"),
        pytest.param(["--filter", "model"], "expected KEY=VALUE", id="no_value"),
    ],
)
def test_a_bad_filter_is_a_usage_error_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], filters: list[str], message: str
) -> None:
    exit_code, drafts = draft(tmp_path, [capture()], *filters)
    assert (exit_code, drafts) == (2, [])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "inside", ["tasks_folder", "tasks_file", "config_tasks_path", "environment"]
)
def test_drafts_are_never_written_inside_the_task_set(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    inside: str,
) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "live.jsonl").write_bytes(TASK_LINES[0] + b"\n")
    source = write_rows(tmp_path / "rows.jsonl", [capture()])
    out = folder / ("live.jsonl" if inside == "tasks_file" else "drafts.jsonl")
    flags: list[str] = []
    if inside in ("tasks_folder", "tasks_file"):
        flags = ["--tasks", str(folder / "live.jsonl") if inside == "tasks_file" else str(folder)]
    elif inside == "config_tasks_path":
        config = tmp_path / "proxy.yaml"
        config.write_text(f"upstream:\n  url: http://127.0.0.1:9/v1\ntasks:\n  path: {folder}\n")
        flags = ["--config", str(config)]
    else:
        monkeypatch.setenv("GRADEPROXY_TASKS_PATH", str(folder))
    code = main(["tasks", "draft", "--from", str(source), "--out", str(out), *flags])
    assert code == 2
    assert "inside the task set" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["live.jsonl"]
    assert (folder / "live.jsonl").read_bytes() == TASK_LINES[0] + b"\n"


def test_the_loader_refuses_a_draft_naming_it(tmp_path: Path) -> None:
    _, [only] = draft(tmp_path, [capture()])
    path = write_rows(tmp_path / "as_tasks.jsonl", [only])
    with pytest.raises(TaskLoadError, match=rf"task '{only['id']}' is a draft \(status: draft\)"):
        load_tasks(path)
    other = write_rows(tmp_path / "odd.jsonl", [{**only, "status": "live"}])
    with pytest.raises(TaskLoadError, match="'status' can only be 'draft'"):
        load_tasks(other)


def label(draft_id: str, verdict: str, at: str, expected: Any = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": "label",
        "row_id": f"label-{draft_id}-{at}",
        "labels": None,
        "draft": draft_id,
        "verdict": verdict,
        "note": None,
        "reviewer": "alice",
        "at": at,
        "row_schema_version": 3,
    }
    if expected is not None:
        row["expected"] = expected
    return row


def three_drafts(tmp_path: Path) -> tuple[Path, list[str]]:
    rows = [
        capture(prompt=[{"role": "user", "content": f"question {n}"}], request_id=str(n))
        for n in range(3)
    ]
    source = write_rows(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "drafts.jsonl"
    assert main(["tasks", "draft", "--from", str(source), "--out", str(out)]) == 0
    return out, [d["id"] for d in read(out)]


@pytest.mark.parametrize(
    ("labels", "kept", "expected_of_first", "printed"),
    [
        pytest.param(None, [0, 1, 2], ZURICH, "", id="no_labels_every_draft"),
        pytest.param(
            [("0", "pass", "T1")], [0], ZURICH, "unlabelled 2", id="pass_keeps_unlabelled_left_out"
        ),
        pytest.param(
            [("0", "fail", "T1"), ("1", "pass", "T1")],
            [1],
            None,
            "labelled_fail 1",
            id="fail_leaves_out",
        ),
        pytest.param(
            [("0", "edit", "T1", [BERN])], [0], BERN, "unlabelled 2", id="edit_replaces_expected"
        ),
        pytest.param(
            [("0", "fail", "T2"), ("0", "pass", "T1")],
            [],
            None,
            "labelled_fail 1",
            id="latest_by_time_wins",
        ),
        pytest.param(
            [("0", "fail", "T1"), ("0", "pass", "T1")],
            [0],
            ZURICH,
            "unlabelled 2",
            id="same_time_later_in_file_wins",
        ),
    ],
)
def test_promote_follows_each_drafts_latest_label(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    labels: list[tuple[Any, ...]] | None,
    kept: list[int],
    expected_of_first: dict[str, Any] | None,
    printed: str,
) -> None:
    drafts, ids = three_drafts(tmp_path)
    times = {"T1": "2026-12-04T12:00:00Z", "T2": "2026-12-04T13:00:00+00:00"}
    flags: list[str] = []
    if labels is not None:
        rows = [label(ids[int(n)], verdict, times[at], *rest) for n, verdict, at, *rest in labels]
        rows.append({"kind": "answer", "result": "pass"})  # other rows are not labels
        flags = ["--labels", str(write_rows(tmp_path / "labels.jsonl", rows))]
    out = tmp_path / "tasks" / "promoted.jsonl"
    assert main(["tasks", "promote", str(drafts), *flags, "--out", str(out)]) == 0
    tasks = read(out)
    assert [t["id"] for t in tasks] == [ids[n] for n in kept]
    assert all("status" not in t and "draft" in t["metadata"] for t in tasks)
    if tasks and expected_of_first is not None:
        assert tasks[0]["expected"] == expected_of_first
    if printed:
        assert f"drafts left out: {printed}" in capsys.readouterr().out
    if tasks:  # the loader takes every promoted task
        load_tasks(out)


def test_an_edit_to_several_calls_is_a_bad_label_not_a_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drafts, ids = three_drafts(tmp_path)
    labels = write_rows(
        tmp_path / "labels.jsonl",
        [
            label(ids[0], "edit", "2026-12-04T12:00:00Z", [ZURICH, BERN]),
            label(ids[1], "pass", "2026-12-04T12:00:00Z"),
        ],
    )
    out = tmp_path / "promoted.jsonl"
    assert main(["tasks", "promote", str(drafts), "--labels", str(labels), "--out", str(out)]) == 1
    assert [t["id"] for t in read(out)] == [ids[1]]
    assert "gives 2 calls; a task expects exactly one" in capsys.readouterr().err


def test_an_edit_equal_to_the_stale_candidate_drops_the_stale(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "rows.jsonl", [graded("fail", BERN), graded("stale", OLD)])
    drafts = tmp_path / "drafts.jsonl"
    assert main(["tasks", "draft", "--from", str(source), "--out", str(drafts)]) == 0
    [only] = read(drafts)
    labels = write_rows(
        tmp_path / "l.jsonl", [label(only["id"], "edit", "2026-12-04T12:00:00Z", [OLD])]
    )
    out = tmp_path / "promoted.jsonl"
    assert main(["tasks", "promote", str(drafts), "--labels", str(labels), "--out", str(out)]) == 0
    [task] = read(out)
    assert task["expected"] == OLD
    assert "stale" not in task["metadata"]


def gradeproxy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradeproxy.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_draft_then_promote_as_processes_passes_validate_tasks(tmp_path: Path) -> None:
    rows = [
        capture(request_id="a"),
        capture(envelope(BERN), request_id="b"),
        capture(request_id="c", route="responses", prompt="Weather in Zürich?"),
        graded("fail", BERN),
        graded("stale", OLD),
        b"not json",
    ]
    source = write_rows(tmp_path / "grades.jsonl", rows)
    drafts = tmp_path / "review" / "drafts.jsonl"
    made = gradeproxy("tasks", "draft", "--from", str(source), "--out", str(drafts))
    assert made.returncode == 1, made.stderr  # one bad row, named, the rest drafted
    assert "grades.jsonl:6" in made.stderr
    assert made.stdout.startswith("3 drafts from 5 rows")
    refused = gradeproxy("validate-tasks", str(drafts))
    assert refused.returncode == 1
    assert "is a draft (status: draft)" in refused.stdout + refused.stderr
    tasks = tmp_path / "tasks.jsonl"
    promoted = gradeproxy("tasks", "promote", str(drafts), "--out", str(tasks))
    assert promoted.returncode == 0, promoted.stderr
    valid = gradeproxy("validate-tasks", str(tasks))
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert len(load_tasks(tasks).tasks) == 3


def test_draft_reads_rows_from_the_rows_database(
    tmp_path: Path, postgres: PostgresServer, pg_password: str
) -> None:
    from proxy.pipeline.record.sinks.postgres import PostgresStore

    url = postgres.database()
    assert main(["db", "migrate", url]) == 0
    store = PostgresStore(url, PASSWORD)
    assert store.open() == "ok"
    rows = [capture(request_id="a"), capture(request_id="b"), graded("pass", ZURICH)]
    assert store.write([dumps(r) + b"\n" for r in rows]) == []
    store.close()
    out = tmp_path / "drafts.jsonl"
    assert main(["tasks", "draft", "--from", url, "--out", str(out)]) == 0
    [only] = read(out)
    assert (only["id"], only["metadata"]["draft"]["count"]) == (GROUP_ID, 2)
