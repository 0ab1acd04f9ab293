"""The live page's data: the scoreboard is the /metrics registry, the failure ring is bounded and
empty without captured answers, raw answers go only to the admin port or loopback, and the
inspector's helpers (first difference, invisible characters) say what they should."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, make_mocked_request
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from grader.loader import parse_task
from proxy.app import make_admin_app
from proxy.config.keys import InboundKey
from proxy.pipeline.guard import KEY_HEADER, Guard
from proxy.pipeline.record.failures import (
    SHOWN_CHARS,
    FailureRing,
    failure_entry,
    first_difference,
    visible_runs,
)
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.surfaces.ui import inspector_allowed, scoreboard
from tests.support.backend import Reply, ScriptedBackend
from tests.support.proxy import ProxyFactory, rows_of


def completion(arguments: dict[str, Any], name: str = "get_weather") -> bytes:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return orjson.dumps(
        {"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]}
    )


def prose(text: str) -> bytes:
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return orjson.dumps(
        {"id": "c2", "object": "chat.completion", "model": "m", "choices": [choice]}
    )


RIGHT = completion({"city": "Zürich", "unit": "celsius"})
STALE = completion({"city": "Zürich", "units": "C"})
WRONG = completion({"city": "Zürich", "unit": "kelvin"})
CHATTY = prose("  I can't do that.\n\tSorry\u200b ")


@pytest.mark.parametrize(
    ("expected", "got", "path"),
    [
        pytest.param({"a": 1}, {"a": 1}, None, id="equal"),
        pytest.param({"a": 1}, {"a": 2}, "a", id="value"),
        pytest.param({"a": 1}, {"a": 1.0}, "a", id="type"),
        pytest.param({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}, "a.b[1]", id="nested_list"),
        pytest.param({"a": [1]}, {"a": [1, 2]}, "a[1]", id="longer_list"),
        pytest.param({"city": "x"}, {"location": "x"}, "city", id="renamed_key_sorted_first"),
        pytest.param({"b": 1, "a": 1}, {"b": 2, "a": 2}, "a", id="keys_in_sorted_order"),
        pytest.param([1], {"a": 1}, "$", id="root"),
    ],
)
def test_first_difference(expected: Any, got: Any, path: str | None) -> None:
    assert first_difference(expected, got) == path


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        pytest.param("plain text", [("plain text", False)], id="plain"),
        pytest.param("a\nb", [("a", False), ("\\n", True), ("\nb", False)], id="newline"),
        pytest.param("a\tb", [("a", False), ("\\t", True), ("b", False)], id="tab"),
        pytest.param("  ab ", [("··", True), ("ab", False), ("·", True)], id="edge_spaces"),
        pytest.param("a b", [("a b", False)], id="inner_space"),
        pytest.param("a\u200bb", [("a", False), ("\\u200b", True), ("b", False)], id="zwsp"),
        pytest.param("a\u00a0b", [("a", False), ("\\xa0", True), ("b", False)], id="nbsp"),
        pytest.param("\ufeffa", [("\\ufeff", True), ("a", False)], id="bom"),
    ],
)
def test_visible_runs(text: str, runs: list[tuple[str, bool]]) -> None:
    assert visible_runs(text) == runs


TASK = parse_task(
    {"id": "t", "expected": {"name": "f", "arguments": {"a": 1}}, "metadata": {"mutationKind": "k"}}
)


def row(n: int, result: str = "fail", **extra: Any) -> dict[str, Any]:
    return {"request_id": f"r{n}", "result": result, "answer": f"answer {n}", "call": None, **extra}


@pytest.mark.parametrize(
    ("size", "capture", "kept"),
    [
        pytest.param(3, True, ["r5", "r4", "r3"], id="bounded_newest_first"),
        pytest.param(10, True, ["r5", "r4", "r3", "r2", "r1"], id="room_for_all"),
        pytest.param(3, False, [], id="capture_answer_off"),
        pytest.param(0, True, [], id="size_zero"),
    ],
)
def test_the_ring_keeps_the_newest_failures(size: int, capture: bool, kept: list[str]) -> None:
    ring = FailureRing(size, capture)
    task = TASK
    ring.add(task, row(0, "pass"))  # a pass is never kept
    for n in range(1, 6):
        ring.add(task, row(n, "stale" if n % 2 else "fail"))
    snapshot = ring.snapshot()
    assert [f["request_id"] for f in snapshot["failures"]] == kept
    assert snapshot["seen"] == 5
    assert snapshot["capture_answer"] is capture


def test_a_ring_entry_computes_the_path_the_grader_left_out() -> None:
    ring = FailureRing(5, True)
    ring.add(TASK, row(1, "stale", call={"name": "f", "arguments": {"b": 1}}))
    (entry,) = ring.snapshot()["failures"]
    assert entry["path"] == "arguments.a"
    assert entry["expected"] == {"name": "f", "arguments": {"a": 1}}


@pytest.mark.parametrize(
    ("extra", "path", "answer", "truncated"),
    [
        pytest.param({}, None, "answer 1", False, id="no_call_no_path"),
        pytest.param(
            {"call": {"name": "f", "arguments": {"b": 1}}},
            "arguments.a",
            "answer 1",
            False,
            id="path_found_when_read",
        ),
        pytest.param(
            {"call": {"name": "f", "arguments": {"b": 1}}, "path": "arguments"},
            "arguments",
            "answer 1",
            False,
            id="the_graders_path_kept",
        ),
        pytest.param(
            {"answer": " \t" + "x" * SHOWN_CHARS},
            None,
            " \t" + "x" * (SHOWN_CHARS - 2),
            True,
            id="long_answer_cut_to_the_shown_size",
        ),
    ],
)
def test_an_entry_is_finished_when_first_read_and_only_then(
    extra: dict[str, Any], path: str | None, answer: str, truncated: bool
) -> None:
    draft = failure_entry(TASK, {**row(1), **extra}, capture_answer=True)
    assert draft is not None
    assert draft["answer_runs"] is None  # nothing split while recording
    ring = FailureRing(5, True)
    ring.extend([draft], 1)
    first, again = (ring.snapshot()["failures"][0] for _ in range(2))
    assert first == again
    assert (first["path"], first["answer_runs"], first["truncated"]) == (
        path,
        visible_runs(answer),
        truncated,
    )
    assert "_answer" not in first  # the draft's text is not shown twice
    assert draft["answer_runs"] == first["answer_runs"]  # kept: the next read does no work


KEYED = Guard(
    (InboundKey(None, b"k-one"), InboundKey(None, b"k-two")),
    protect_metrics=False,
    max_body_bytes=1024,
    watchdog=None,
)
KEYLESS = Guard((), protect_metrics=False, max_body_bytes=1024, watchdog=None)
REMOTE = "203.0.113.9"


@pytest.mark.parametrize(
    ("remote", "admin", "guard", "headers", "allowed"),
    [
        pytest.param("127.0.0.1", False, KEYLESS, {}, True, id="loopback_v4"),
        pytest.param("127.0.0.53", False, KEYLESS, {}, True, id="loopback_range"),
        pytest.param("::1", False, KEYLESS, {}, True, id="loopback_v6"),
        pytest.param(REMOTE, False, KEYLESS, {}, False, id="keyless_remote"),
        pytest.param("10.0.0.7", False, None, {}, False, id="private_remote_no_guard"),
        pytest.param(REMOTE, True, KEYLESS, {}, True, id="admin_port"),
        pytest.param(REMOTE, False, KEYED, {KEY_HEADER: "k-two"}, True, id="keyed_remote_header"),
        pytest.param(
            REMOTE, False, KEYED, {"Authorization": "Bearer k-one"}, True, id="keyed_remote_bearer"
        ),
        pytest.param(REMOTE, False, KEYED, {}, False, id="keyless_remote_with_keys_on"),
        pytest.param(REMOTE, False, KEYED, {KEY_HEADER: "k-three"}, False, id="wrong_key"),
        pytest.param(
            REMOTE, False, KEYED, {"Authorization": "Basic k-one"}, False, id="not_a_bearer"
        ),
        pytest.param(REMOTE, False, KEYLESS, {KEY_HEADER: ""}, False, id="no_keys_configured"),
    ],
)
def test_who_may_read_raw_answers(
    remote: str, admin: bool, guard: Guard | None, headers: dict[str, str], allowed: bool
) -> None:
    """The admin port, loopback, or a valid inbound key (the guard's own check); no one else."""
    request = make_mocked_request("GET", "/ui/failures.json", headers=headers).clone(remote=remote)
    assert inspector_allowed(request, admin, guard) is allowed


async def test_a_keyed_request_reads_the_inspector_and_a_keyless_one_is_refused(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the traffic port with keys on, the guard turns a keyless request away first (401);
    a keyed one gets the ring, and the scoreboard says the inspector is open to it."""
    monkeypatch.setenv("TEST_UI_KEYS", "k-ui")
    client = await make_proxy(auth={"keys_env": "TEST_UI_KEYS"})
    assert (await client.get("/ui/failures.json")).status == 401
    keyed = {KEY_HEADER: "k-ui"}
    answer = await client.get("/ui/failures.json", headers=keyed)
    assert answer.status == 200
    assert "failures" in await answer.json()
    board = await (await client.get("/ui/scoreboard.json", headers=keyed)).json()
    assert board["inspector"] is True


async def metric_counts(client: TestClient[web.Request, web.Application]) -> Counter[str]:
    text = await (await client.get("/metrics")).text()
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gradeproxy_grades_total":
                counts[sample.labels["result"]] += int(sample.value)
    return counts


async def send(client: TestClient[web.Request, web.Application], replies: list[bytes]) -> None:
    for _ in replies:
        response = await client.post(
            "/v1/chat/completions", data=b"{}", headers={"X-Grade-Task": "weather.single"}
        )
        await response.read()


async def test_scoreboard_and_inspector_follow_the_traffic(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    answers = [RIGHT, STALE, WRONG, CHATTY, RIGHT]
    backend.replies.extend(Reply(body=body) for body in answers)
    client = await make_proxy()
    await send(client, answers)
    rows = await rows_of(client, results_path)
    board = await (await client.get("/ui/scoreboard.json")).json()
    (total,) = board["totals"]
    assert {k: total[k] for k in ("graded", "pass", "stale", "fail")} == {
        "graded": 5,
        **(await metric_counts(client)),
    }
    assert (total["pass"], total["stale"], total["fail"]) == (2, 1, 2)
    assert board["rows_written"] == len(rows) == 5
    assert board["episodes"] == []  # no episode graded: the page hides the section
    (task,) = board["tasks"]
    assert task["checks"]["tool_call"] == {"pass": 2, "fail": 3, "error": 0}
    failures = (await (await client.get("/ui/failures.json")).json())["failures"]
    assert [f["result"] for f in failures] == ["fail", "fail", "stale"]  # newest first
    chatty, wrong, stale = failures
    assert wrong["path"] == "arguments.unit"
    assert stale["path"] == "arguments.unit"  # the key the stale call left out
    assert chatty["path"] is None
    assert ["\\n", True] in chatty["answer_runs"]
    assert ["\\t", True] in chatty["answer_runs"]


async def test_no_captured_answers_no_inspector_entries(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    backend.replies.append(Reply(body=WRONG))
    client = await make_proxy(results={"answer": "drop"})
    await send(client, [WRONG])
    await rows_of(client, results_path)
    snapshot = await (await client.get("/ui/failures.json")).json()
    assert (snapshot["failures"], snapshot["seen"], snapshot["capture_answer"]) == ([], 1, False)


async def test_index_links_and_health_answers_like_readyz(make_proxy: ProxyFactory) -> None:
    client = await make_proxy()
    index = await (await client.get("/")).text()
    for link in ('href="/ui"', 'href="/metrics"', 'href="/readyz"'):
        assert link in index
    health, ready = await client.get("/health"), await client.get("/readyz")
    answers = [await health.json(), await ready.json()]
    for answer in answers:
        del answer["grading"]["idle_s"]  # a clock
    assert health.status == ready.status == 200
    assert answers[0] == answers[1]
    page = await client.get("/ui")
    assert page.content_type == "text/html"
    assert "/ui/scoreboard.json" in await page.text()


async def test_with_an_admin_port_the_page_lives_there(
    make_proxy: ProxyFactory,
    aiohttp_client: Any,
) -> None:
    client = await make_proxy(admin={"port": 0})
    assert (await client.get("/ui")).status == 404
    admin = await aiohttp_client(make_admin_app(client.app))
    for path in ("/ui", "/ui/scoreboard.json", "/ui/failures.json", "/", "/health"):
        assert (await admin.get(path)).status == 200, path


def test_the_scoreboard_puts_primary_and_shadow_side_by_side() -> None:
    """With a shadow, every task and kind has a row per variant; primary comes first."""
    metrics = ProxyMetrics()
    metrics.task_info.labels("t", "field_renamed").set(1)
    plan = [("primary", "pass"), ("primary", "stale"), ("shadow", "pass"), ("shadow", "pass")]
    for variant, result in plan:
        metrics.child(metrics.grades, "t", "m", result, variant).inc()
    metrics.child(metrics.check_results, "t", "tool_call", "pass", "shadow").inc(2)
    board = scoreboard(metrics)
    assert board["variants"] == ["primary", "shadow"]
    rows = {(r["kind"], r["variant"]): (r["graded"], r["pass"], r["stale"]) for r in board["kinds"]}
    assert rows == {("field_renamed", "primary"): (2, 1, 1), ("field_renamed", "shadow"): (2, 2, 0)}
    shadow = next(t for t in board["tasks"] if t["variant"] == "shadow")
    assert shadow["pass_rate"] == 1.0
    assert shadow["checks"] == {"tool_call": {"pass": 2, "fail": 0, "error": 0}}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_a_value_never_differs_from_itself(value: Any) -> None:
    assert first_difference(value, value) is None


@given(JSON_VALUES, JSON_VALUES)
def test_unequal_values_always_have_a_first_difference(left: Any, right: Any) -> None:
    same = json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)
    assert (first_difference(left, right) is None) is same


ESCAPE = re.compile(r"\\[ntrvf]|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|·")
NAMED = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\v": "\x0b", "\\f": "\x0c", "·": " "}


def reconstruct(runs: list[tuple[str, bool]]) -> str:
    """The answer back from its runs: hidden runs decoded, the line break kept after a shown
    newline dropped."""
    out, after_newline = [], False
    for shown, hidden in runs:
        if hidden:
            tokens = ESCAPE.findall(shown)
            assert "".join(tokens) == shown, shown  # a hidden run is escapes only
            out += [NAMED.get(t) or chr(int(t[2:], 16)) for t in tokens]
            after_newline = shown.endswith("\\n")
        else:
            out.append(shown[1:] if after_newline else shown)
            after_newline = False
    return "".join(out)


# The escapes reconstruct() reads, turned around (the edge space is handled on its own).
NAMED_ESCAPES = {char: escape for escape, char in NAMED.items() if char != " "}


def runs_char_by_char(text: str) -> list[tuple[str, bool]]:
    """The runs as their definition reads, one character at a time: hidden is an edge space
    or what ``str.isprintable`` refuses; a shown newline is followed by the line break."""
    lead = len(text) - len(text.lstrip(" "))
    tail_start = len(text.rstrip(" ")) if lead < len(text) else 0
    runs: list[tuple[str, bool]] = []
    for index, char in enumerate(text):
        hidden = (char == " " and (index < lead or index >= tail_start)) or not char.isprintable()
        shown = (
            (NAMED_ESCAPES.get(char) or ("·" if char == " " else ascii(char)[1:-1]))
            if hidden
            else char
        )
        if runs and runs[-1][1] == hidden:
            runs[-1] = (runs[-1][0] + shown, hidden)
        else:
            runs.append((shown, hidden))
        if char == "\n":
            runs.append(("\n", False))
    return runs


@given(st.text(alphabet=st.sampled_from(' \n\t\u200b\u00a0aZ\u00e9{}"')) | st.text())
def test_runs_are_what_a_character_by_character_reading_gives(text: str) -> None:
    assert visible_runs(text) == runs_char_by_char(text)


@given(st.text())
def test_shown_runs_hide_nothing_and_lose_nothing(text: str) -> None:
    """The runs give the answer back exactly, and outside the marked runs only visible
    characters remain (plus inner spaces and the kept line breaks)."""
    runs = visible_runs(text)
    assert reconstruct(runs) == text
    for shown, hidden in runs:
        if not hidden:
            assert all(c in " \n" or unicodedata.category(c)[0] not in "CZ" for c in shown)
