"""Agent episodes through the proxy: one row when a response ends the episode, the same row as
``gradeproxy replay`` gives offline, skips and limits counted, and the metric per column."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gradeproxy.cli import main
from grader.episodes.report import EpisodeReport
from tests.support.backend import SSE, Reply, ScriptedBackend
from tests.support.episodes import (
    GOOD_BILLING,
    GOOD_BILLING_FINAL,
    LIVE_FIELDS,
    Step,
    chat,
    completion,
)
from tests.support.judge import judge_app
from tests.support.paths import REPO
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.responses_wire import Case, Text
from tests.support.responses_wire import body as responses_body
from tests.support.rows import without_row_id
from tests.support.tasks import BILLING, EPISODES

pytestmark = pytest.mark.task_file(EPISODES)
Client = TestClient[web.Request, web.Application]


async def drive(
    client: Client,
    backend: ScriptedBackend,
    steps: list[Step],
    final: str | None,
    headers: dict[str, str],
) -> list[dict[str, Any]]:
    """Run an agent loop: each turn sends the whole history; the backend answers the next step.
    Returns the history as the agent ends with it (the final assistant message included)."""
    history = chat(steps, final)
    turns = [i for i, m in enumerate(history) if m["role"] == "assistant"]
    for index in turns:
        backend.replies.append(Reply(body=completion(history[index])))
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "gpt-4.1-mini", "messages": history[:index]},
            headers={"X-Grade-Task": BILLING, **headers},
        )
        assert response.status == 200
        await response.read()
    return history


async def metric(client: Client, prefix: str) -> dict[str, float]:
    text = await (await client.get("/metrics")).text()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


async def test_one_row_for_the_episode_and_the_same_row_offline(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, tmp_path: Path
) -> None:
    client = await make_proxy()
    history = await drive(
        client,
        backend,
        GOOD_BILLING,
        GOOD_BILLING_FINAL,
        {"X-Grade-Episode": "ep-1", "X-Grade-Run": "r1"},
    )
    [row] = await rows_of(client, results_path)
    assert (row["kind"], row["episode_id"], row["result"], row["turns"], row["calls"]) == (
        "episode",
        "ep-1",
        "pass",
        5,
        4,
    )
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(
        json.dumps({"task_id": BILLING, "episode_id": "ep-1", "messages": history}) + "\n"
    )
    out = tmp_path / "rows.jsonl"
    assert (
        main(["replay", "--tasks", str(EPISODES), "--episodes", str(episodes), "--out", str(out)])
        == 0
    )
    offline = json.loads(out.read_text())
    assert without_row_id({k: v for k, v in row.items() if k not in LIVE_FIELDS}) == without_row_id(
        offline
    )
    skipped = await metric(client, "gradeproxy_grading_skipped_total")
    assert skipped['gradeproxy_grading_skipped_total{reason="episode_turn"}'] == 4
    columns = await metric(client, "gradeproxy_episode_columns_total")
    key = (
        f'gradeproxy_episode_columns_total{{column="authority_ok",result="pass",task="{BILLING}"}}'
    )
    assert columns[key] == 1


async def test_a_delete_earlier_in_the_history_fails_the_episode(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """The issue's four-turn agent: turn rows missed turn 2's delete; the episode sees it."""
    client = await make_proxy()
    steps: list[Step] = [
        ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"}),
        ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True}),
        ("refund_payment", {"payment_id": "pay_1002"}, {"ok": True}),
    ]
    await drive(client, backend, steps, "Refunded the duplicate.", {"X-Grade-Episode": "ep-2"})
    [row] = await rows_of(client, results_path)
    assert (row["result"], row["authority_ok"], row["no_forbidden_change"]) == ("fail", False, True)
    assert "'delete_payment' is not an allowed action" in row["columns"][2]["reason"]
    failed = await metric(client, "gradeproxy_episodes_total")
    assert failed[f'gradeproxy_episodes_total{{result="fail",task="{BILLING}"}}'] == 1


async def test_a_failing_episode_is_shown_in_the_failure_inspector(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """It used to be counted as seen and never shown ("0 shown, 1 seen"): an episode row has no
    single answer; its entry names the failed column and why."""
    client = await make_proxy()
    steps: list[Step] = [
        ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"}),
        ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True}),
    ]
    await drive(client, backend, steps, "Done.", {"X-Grade-Episode": "ep-shown"})
    await rows_of(client, results_path)
    inspector = await (await client.get("/ui/failures.json")).json()
    [entry] = inspector["failures"]
    assert inspector["seen"] == 1
    assert (entry["kind"], entry["task_id"], entry["result"]) == ("episode", BILLING, "fail")
    failed = {c["name"]: c for c in entry["columns"] if c["passed"] is False}
    assert "'delete_payment' is not an allowed action" in failed["authority_ok"]["reason"]
    assert entry["reason_code"] in {c["reason_code"] for c in failed.values()}


@pytest.mark.parametrize(
    ("trusted", "second"),
    [
        pytest.param(True, ("billing_lead", True), id="trusted_header_wins"),
        # Issue 39: any client could name itself billing_lead and turn authority_ok true.
        pytest.param(False, ("billing_specialist", False), id="untrusted_header_ignored"),
    ],
)
async def test_role_header_decides_authority_only_when_trusted(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    trusted: bool,
    second: tuple[str, bool],
) -> None:
    client = await make_proxy(grading={"trust_role_header": trusted})
    steps: list[Step] = [
        ("refund_payment", {"payment_id": "pay_1002"}, {"ok": True}),
        ("cancel_invoice", {"invoice_id": "inv_501"}, {"ok": True}),
    ]
    for episode, role in (("a", None), ("b", "billing_lead")):
        headers = {"X-Grade-Episode": episode} | ({"X-Grade-Role": role} if role else {})
        await drive(client, backend, steps, GOOD_BILLING_FINAL, headers)
    rows = await rows_of(client, results_path)
    assert [(r["role"], r["authority_ok"], r["outcome"]) for r in rows] == [
        ("billing_specialist", False, "accepted_alternatives[0]"),
        (*second, "accepted_alternatives[0]"),
    ]


async def test_end_header_ends_an_episode_on_a_tool_call_turn(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    history = chat(GOOD_BILLING, None)
    backend.replies.append(Reply(body=completion(history[-2])))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": history[:-2]},
        headers={"X-Grade-Task": BILLING, "X-Grade-Episode": "e", "X-Grade-Episode-End": "true"},
    )
    await response.read()
    [row] = await rows_of(client, results_path)
    assert (row["calls"], row["end_state_ok"], row["side_effects_ok"]) == (4, True, True)
    assert row["cause_correct"] is False  # no final text: the cause was never stated


async def test_a_retried_final_turn_keeps_the_last_row_per_episode(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    history = chat(GOOD_BILLING, GOOD_BILLING_FINAL)
    for _ in range(2):
        backend.replies.append(Reply(body=completion(history[-1])))
        await (
            await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": history[:-1]},
                headers={"X-Grade-Task": BILLING, "X-Grade-Episode": "same"},
            )
        ).read()
    rows = await rows_of(client, results_path)
    report = EpisodeReport("d")
    report.extend(rows)
    assert (len(rows), report.to_dict()["episodes"]) == (2, 1)


async def test_incomplete_histories_are_counted_never_graded(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    trimmed = chat(GOOD_BILLING, GOOD_BILLING_FINAL)[2:]  # starts with a tool result
    backend.replies.append(Reply(body=completion(trimmed[-1])))
    await (
        await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": trimmed[:-1]},
            headers={"X-Grade-Task": BILLING},
        )
    ).read()
    backend.replies.append(
        Reply(body=responses_body(Case("final", (Text(GOOD_BILLING_FINAL, "msg_1"),))))
    )
    await (
        await client.post(
            "/v1/responses",
            json={"model": "m", "previous_response_id": "resp_1", "input": "thanks"},
            headers={"X-Grade-Task": BILLING},
        )
    ).read()
    assert await rows_of(client, results_path) == []
    skipped = await metric(client, "gradeproxy_grading_skipped_total")
    assert skipped['gradeproxy_grading_skipped_total{reason="episode_incomplete"}'] == 2


async def test_limits_are_counted(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy(grading={"episode_max_turns": 2})
    await drive(client, backend, GOOD_BILLING, GOOD_BILLING_FINAL, {})
    assert await rows_of(client, results_path) == []
    limits = await metric(client, "gradeproxy_episode_limits_total")
    assert limits['gradeproxy_episode_limits_total{limit="turns"}'] == 1


async def test_judge_form_cause_is_judged_live_and_offline_alike(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    tasks_file: Path,
    tmp_path: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    rubric = {
        "type": "label_model",
        "name": "root_cause",
        "model": "judge-model-2024-08-06",
        "criterion": "The explanation says the card had expired.",
        "pass_examples": ["The card expired."],
        "fail_examples": ["Try again later."],
    }
    task = {
        "id": "judged.cause",
        "prompt": "Why did the payment fail?",
        "episode": {"schema_version": 1, "root_cause": {"judge": rubric}},
    }
    text = await asyncio.to_thread(tasks_file.read_text)
    await asyncio.to_thread(tasks_file.write_text, text + json.dumps(task) + "\n")
    seen: list[Any] = []
    judge = await aiohttp_server(judge_app(["PASS", "PASS"], seen))
    endpoint = str(judge.make_url("/v1"))
    client = await make_proxy(judge={"endpoint": endpoint})
    history = [{"role": "user", "content": "Why did the payment fail?"}]
    final = {"role": "assistant", "content": "Your card had expired on 2026-11."}
    backend.replies.append(Reply(body=completion(final)))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": history},
        headers={"X-Grade-Task": "judged.cause", "X-Grade-Episode": "j"},
    )
    await response.read()
    [row] = await rows_of(client, results_path)
    assert (row["cause_correct"], row["result"]) == (True, "pass")
    assert "Your card had expired" in json.dumps(seen[0]["messages"])
    episodes = tmp_path / "episodes.jsonl"
    line = {"task_id": "judged.cause", "episode_id": "j", "messages": [*history, final]}
    episodes.write_text(json.dumps(line) + "\n")
    judge_config = tmp_path / "judge.yaml"
    judge_config.write_text(f"endpoint: {endpoint}\n")
    out = tmp_path / "rows.jsonl"
    args = ["replay", "--tasks", str(tasks_file), "--episodes", str(episodes), "--out", str(out)]
    # In a thread: the CLI runs its own event loop (asyncio.run), and the judge server runs on
    # this one.
    assert await asyncio.to_thread(main, [*args, "--judge", str(judge_config)]) == 0
    offline = json.loads(out.read_text())
    assert without_row_id({k: v for k, v in row.items() if k not in LIVE_FIELDS}) == without_row_id(
        offline
    )


async def test_a_task_with_turn_checks_keeps_its_turn_rows_beside_the_episode_row(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, tasks_file: Path
) -> None:
    lines = (await asyncio.to_thread(tasks_file.read_text)).splitlines()
    billing = json.loads(next(line for line in lines if BILLING in line))
    mixed = {
        "id": BILLING,
        "expected": {"name": "cancel_invoice", "arguments": {"invoice_id": "inv_501"}},
        "episode": billing["episode"],
    }
    await asyncio.to_thread(tasks_file.write_text, json.dumps(mixed) + "\n")
    client = await make_proxy()
    await drive(client, backend, GOOD_BILLING, GOOD_BILLING_FINAL, {"X-Grade-Episode": "m"})
    rows = await rows_of(client, results_path)
    turn_rows = [r for r in rows if r.get("kind") != "episode"]
    assert [r["result"] for r in turn_rows] == ["fail", "fail", "fail", "pass", "fail"]
    assert [r["episode_id"] for r in rows if r.get("kind") == "episode"] == ["m"]
    skipped = await metric(client, "gradeproxy_grading_skipped_total")
    assert skipped['gradeproxy_grading_skipped_total{reason="episode_turn"}'] == 0


@pytest.mark.parametrize(
    ("role", "trusted", "authorised"),
    [
        pytest.param(None, True, True, id="item_role"),
        pytest.param("trainee", True, False, id="trusted_header_over_item_role"),
        pytest.param("trainee", False, True, id="untrusted_header_ignored"),
    ],
)
async def test_role_header_reaches_the_per_turn_policy_check(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    tasks_file: Path,
    role: str | None,
    trusted: bool,
    authorised: bool,
) -> None:
    """The one-response case: the same role rule as episodes, X-Grade-Role over item.role
    when ``grading.trust_role_header`` allows it."""
    examples = REPO / "config" / "tasks" / "checks-examples.jsonl"
    lines = (await asyncio.to_thread(examples.read_text)).splitlines()
    policy = next(line for line in lines if '"payments.new_required_field.policy"' in line)
    await asyncio.to_thread(tasks_file.write_text, policy + "\n")
    arguments = {"payment_id": "pay_8QwErTy12AbCdEf", "amount": 40, "currency": "EUR"}
    call = {
        "id": "call_1",
        "type": "function",
        "function": {
            "name": "create_refund",
            "arguments": json.dumps({**arguments, "reason": "duplicate"}),
        },
    }
    backend.replies.append(Reply(body=completion({"role": "assistant", "tool_calls": [call]})))
    client = await make_proxy(grading={"trust_role_header": trusted})
    headers = {"X-Grade-Task": "payments.new_required_field.policy"}
    headers |= {"X-Grade-Role": role} if role else {}
    response = await client.post("/v1/chat/completions", json={"messages": []}, headers=headers)
    await response.read()
    [row] = await rows_of(client, results_path)
    columns = {c["name"]: c["passed"] for c in row["checks"]}
    assert columns["refunds.authority_ok"] is authorised


def text_stream(text: str) -> bytes:
    """A chat.completion.chunk SSE stream of ``text``, as OpenAI streams it."""
    base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1746900990}
    pieces = re.findall(r"\S+\s*", text)
    assert "".join(pieces) == text
    deltas = [{"role": "assistant", "content": ""}] + [{"content": p} for p in pieces]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


async def test_a_streamed_final_turn_ends_the_episode(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy()
    history = chat(GOOD_BILLING, GOOD_BILLING_FINAL)
    backend.replies.append(Reply(body=text_stream(GOOD_BILLING_FINAL), content_type=SSE))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "m", "stream": True, "messages": history[:-1]},
        headers={"X-Grade-Task": BILLING, "X-Grade-Episode": "s"},
    )
    await response.read()
    [row] = await rows_of(client, results_path)
    assert (row["stream"], row["result"], row["cause_correct"]) == (True, "pass", True)


async def test_the_scoreboard_shows_the_episode_metrics(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    """One passing and one failing episode: the page's JSON says what /metrics says."""
    client = await make_proxy()
    bad: list[Step] = [
        ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"}),
        ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True}),
    ]
    await drive(client, backend, GOOD_BILLING, GOOD_BILLING_FINAL, {"X-Grade-Episode": "good"})
    await drive(client, backend, bad, "Refunded the duplicate.", {"X-Grade-Episode": "bad"})
    rows = await rows_of(client, results_path)
    assert sorted(r["result"] for r in rows) == ["fail", "pass"]
    board = await (await client.get("/ui/scoreboard.json")).json()
    [shown] = board["episodes"]
    episodes = await metric(client, "gradeproxy_episodes_total{")
    columns = await metric(client, "gradeproxy_episode_columns_total{")
    assert shown["task"] == BILLING
    assert (shown["graded"], shown["pass"], shown["fail"], shown["error"]) == (2, 1, 1, 0)
    for result in ("pass", "fail", "error"):
        key = f'gradeproxy_episodes_total{{result="{result}",task="{BILLING}"}}'
        assert shown[result] == episodes.get(key, 0)
    assert shown["pass_rate"] == 0.5
    expected = {
        (m["column"], m["result"]): value
        for key, value in columns.items()
        if (m := dict(re.findall(r'(\w+)="([^"]*)"', key)))
    }
    assert {
        (name, result): count
        for name, counts in shown["columns"].items()
        for result, count in counts.items()
        if count
    } == {k: v for k, v in expected.items() if v}
    assert set(shown["columns"]) == {c["name"] for c in rows[0]["columns"]}
    assert shown["columns"]["authority_ok"] == {"pass": 1, "fail": 1, "error": 0}
