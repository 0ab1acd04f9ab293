"""The review queue's endpoints on a real proxy: what it offers, who may label, what a label
post must be, and that a label is a row of its own appended to the results file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiohttp.test_utils import TestServer

from gradeproxy.cli import main
from grader.json import dumps
from grader.labels import label_row, latest_labels
from proxy.app import make_app
from proxy.pipeline.guard import KEY_HEADER
from proxy.rowsdb import columns_of, parse_url, write_batch
from proxy.rowsdb import read_rows as read_db
from proxy.surfaces.review import RowItems, result_files
from proxy.uisession import COOKIE
from tests.support.files import write_jsonl
from tests.support.fixtures import ClientFactory
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.proxy import Client, ProxyFactory, build_config, read_rows
from tests.support.review import HOSTILE, OFFERED, drafts, rid, seeded_rows

KEY = "k-review-secret"
DRAFT = "draft:draft.0a1b2c3d.4e5f6a7b"


@pytest.fixture
def seeded(results_path: Path, tmp_path: Path) -> Path:
    """The results file holds the seeded rows; the drafts file two drafts."""
    results_path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(results_path, seeded_rows())
    return write_jsonl(tmp_path / "drafts.jsonl", drafts())


async def _proxy(make_proxy: ProxyFactory, drafts_path: Path, **sections: Any) -> Client:
    review = {"drafts_path": str(drafts_path), "judged_sample": 1.0}
    return await make_proxy(review=review, **sections)


async def _post(client: Client, body: Any, **headers: str) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers.setdefault("Content-Type", "application/json")
    answer = await client.post("/ui/review/label", data=data, headers=headers)
    return answer.status, await answer.json()


async def test_the_queue_offers_drafts_then_judged_parse_errors_and_advisory_rows(
    make_proxy: ProxyFactory, seeded: Path
) -> None:
    client = await _proxy(make_proxy, seeded)
    data = await (await client.get("/ui/review/items.json")).json()
    keys = [item["key"] for item in data["items"]]
    assert keys == [DRAFT, f"draft:draft.{HOSTILE}", *(f"row:{r}" for r in OFFERED)]
    types = [item["type"] for item in data["items"]]
    judged = ["judged"] * 3
    assert types == ["draft", "draft", *judged, "judge_parse_error", "advisory"]
    assert (data["total"], data["reviewed"], data["writable"]) == (7, 0, True)


@pytest.mark.parametrize(
    ("sample", "judged"),
    [pytest.param(0.0, 0, id="none_sampled"), pytest.param(1.0, 3, id="all_sampled")],
)
async def test_judged_rows_are_sampled_but_parse_errors_and_advisory_rows_never_are(
    make_proxy: ProxyFactory, seeded: Path, sample: float, judged: int
) -> None:
    client = await make_proxy(review={"drafts_path": str(seeded), "judged_sample": sample})
    items = (await (await client.get("/ui/review/items.json")).json())["items"]
    assert sum(item["type"] == "judged" for item in items) == judged
    assert {"judge_parse_error", "advisory"} <= {item["type"] for item in items}


BAD_POSTS = [
    # (body, extra headers, status, words in the reason)
    pytest.param(b"{not json", {}, 400, "not JSON", id="bad_json"),
    pytest.param(b"[1, 2]", {}, 400, "expected", id="not_an_object"),
    pytest.param({"item": "row:" + rid(99), "verdict": "pass"}, {}, 404, "no item",
                 id="unknown_row"),
    pytest.param({"item": "draft:nope", "verdict": "pass"}, {}, 404, "no item",
                 id="unknown_draft"),
    pytest.param({"item": "row:" + rid(6), "verdict": "pass"}, {}, 404, "no item",
                 id="row_not_in_the_queue"),
    pytest.param({"item": "row:" + rid(1), "verdict": "maybe"}, {}, 400, "pass, fail or edit",
                 id="unknown_verdict"),
    pytest.param({"item": "row:" + rid(1), "verdict": "edit", "expected": {}}, {}, 400,
                 "only a draft", id="edit_of_a_row"),
    pytest.param({"item": DRAFT, "verdict": "edit",
                  "expected": {"name": "delete_ticket", "arguments": {}}}, {}, 400,
                 "no tool named 'delete_ticket'", id="edit_names_no_tool"),
    pytest.param({"item": DRAFT, "verdict": "edit",
                  "expected": {"name": "create_ticket", "arguments": {"priority": "low"}}}, {},
                 400, "'title' is a required property", id="edit_misses_a_required_argument"),
    pytest.param({"item": DRAFT, "verdict": "edit",
                  "expected": {"name": "create_ticket", "arguments": {"title": 3}}}, {}, 400,
                 "arguments.title: 3 is not of type 'string'", id="edit_argument_of_wrong_type"),
    pytest.param({"item": DRAFT, "verdict": "edit",
                  "expected": {"name": "create_ticket", "arguments": {"title": "x", "due": 1}}},
                 {}, 400, "Additional properties", id="edit_argument_not_declared"),
    pytest.param({"item": DRAFT, "verdict": "edit", "expected": "create_ticket()"}, {}, 400,
                 "a call is an object", id="edit_not_a_call"),
    pytest.param({"item": DRAFT, "verdict": "edit", "expected": []}, {}, 400,
                 "at least one call", id="edit_of_no_calls"),
    pytest.param({"item": DRAFT, "verdict": "pass", "note": 5}, {}, 400, "'note' must be",
                 id="note_not_text"),
    pytest.param({"item": DRAFT, "verdict": "pass", "note": "x" * 4001}, {}, 400, "longer",
                 id="note_too_long"),
    pytest.param({"item": DRAFT, "verdict": "pass"}, {"Content-Type": "text/plain"}, 415,
                 "as JSON", id="not_sent_as_json"),
    pytest.param({"item": DRAFT, "verdict": "pass"}, {"Origin": "http://evil.example"}, 403,
                 "same origin", id="another_origin"),
    pytest.param({"item": DRAFT, "verdict": "pass"}, {"Sec-Fetch-Site": "cross-site"}, 403,
                 "same origin", id="cross_site_fetch"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "headers", "status", "words"), BAD_POSTS)
async def test_a_bad_label_post_is_refused_with_a_reason_and_writes_nothing(
    make_proxy: ProxyFactory,
    seeded: Path,
    results_path: Path,
    body: Any,
    headers: dict[str, str],
    status: int,
    words: str,
) -> None:
    client = await _proxy(make_proxy, seeded)
    before = read_rows(results_path)
    got, answer = await _post(client, body, **headers)
    assert (got, words in answer["error"]) == (status, True), answer
    assert read_rows(results_path) == before


JAM = {"name": "create_ticket", "arguments": {"title": "Jam", "priority": "high"}}
GOOD_POSTS = [
    # (body, the label's fields)
    pytest.param({"item": "row:" + rid(2), "verdict": "fail", "note": f"  {HOSTILE}  "},
                 {"labels": rid(2), "draft": None, "verdict": "fail", "note": HOSTILE},
                 id="fail_a_row_with_a_note"),
    pytest.param({"item": "row:" + rid(4), "verdict": "pass", "note": "   "},
                 {"labels": rid(4), "verdict": "pass", "note": None}, id="blank_note_is_none"),
    pytest.param({"item": DRAFT, "verdict": "edit", "expected": JAM},
                 {"labels": None, "draft": DRAFT[6:], "verdict": "edit", "expected": [JAM]},
                 id="edit_one_call_stored_as_a_list"),
    pytest.param({"item": DRAFT, "verdict": "edit", "expected": [
                     {"name": "close_ticket", "arguments": {"any": "thing"}},
                     {"name": "create_ticket", "arguments": {"title": "t"}}]},
                 {"verdict": "edit", "expected": [
                     {"name": "close_ticket", "arguments": {"any": "thing"}},
                     {"name": "create_ticket", "arguments": {"title": "t"}}]},
                 id="edit_two_calls_tool_without_parameters"),
    pytest.param({"item": DRAFT, "verdict": "pass"},
                 {"draft": DRAFT[6:], "verdict": "pass", "reviewer": None},
                 id="pass_a_draft"),
    pytest.param({"item": DRAFT, "verdict": "fail"}, {"verdict": "fail"},
                 id="same_origin_browser_post"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "fields"), GOOD_POSTS)
async def test_a_label_is_a_new_row_and_the_labelled_row_is_untouched(
    make_proxy: ProxyFactory,
    seeded: Path,
    results_path: Path,
    body: dict[str, Any],
    fields: dict[str, Any],
) -> None:
    client = await _proxy(make_proxy, seeded)
    before = read_rows(results_path)
    origin = f"http://{client.server.host}:{client.server.port}"
    status, answer = await _post(client, body, Origin=origin, **{"Sec-Fetch-Site": "same-origin"})
    assert status == 200, answer
    rows = read_rows(results_path)
    assert rows[:-1] == before  # one row appended, nothing else changed
    label = rows[-1]
    assert label == answer["label"]
    assert {k: label[k] for k in fields} == fields
    assert label["kind"] == "label"
    assert label["row_id"] not in {r["row_id"] for r in before}
    assert label["at"].endswith("+00:00")
    items = (await (await client.get("/ui/review/items.json")).json())["items"]
    shown = next(item for item in items if item["key"] == body["item"])
    assert shown["label"] == label


async def test_the_latest_label_wins_and_progress_counts_items_not_labels(
    make_proxy: ProxyFactory, seeded: Path, results_path: Path
) -> None:
    client = await _proxy(make_proxy, seeded)
    for verdict in ("pass", "fail", "pass"):
        assert (await _post(client, {"item": "row:" + rid(1), "verdict": verdict}))[0] == 200
    assert (await _post(client, {"item": DRAFT, "verdict": "fail"}))[0] == 200
    data = await (await client.get("/ui/review/items.json")).json()
    assert (data["reviewed"], data["total"]) == (2, 7)
    first = next(item for item in data["items"] if item["key"] == "row:" + rid(1))
    assert first["label"]["verdict"] == "pass"
    latest = latest_labels(read_rows(results_path))
    assert latest[("row", rid(1))]["verdict"] == "pass"


async def test_without_a_results_file_a_label_cannot_be_stored(
    backend_server: TestServer, tasks_file: Path, seeded: Path, aiohttp_client: ClientFactory
) -> None:
    upstream = str(backend_server.make_url("/v1"))
    config = build_config(upstream, tasks_file, None, review={"drafts_path": str(seeded)})
    client = await aiohttp_client(make_app(config))
    data = await (await client.get("/ui/review/items.json")).json()
    assert (data["writable"], len(data["items"])) == (False, 2)  # drafts only: no rows to read
    status, answer = await _post(client, {"item": DRAFT, "verdict": "pass"})
    assert (status, "results.path" in answer["error"]) == (503, True)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/ui/review/items.json", 401, id="items"),
        pytest.param("POST", "/ui/review/label", 401, id="label"),
    ],
)
async def test_with_keys_the_queue_needs_a_key_or_the_page_session(
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
    seeded: Path,
    method: str,
    path: str,
    status: int,
) -> None:
    monkeypatch.setenv("TEST_REVIEW_KEYS", KEY)
    client = await _proxy(make_proxy, seeded, auth={"keys_env": "TEST_REVIEW_KEYS"})
    body = json.dumps({"item": DRAFT, "verdict": "pass"}).encode()
    json_type = {"Content-Type": "application/json"}
    assert (await client.request(method, path, data=body, headers=json_type)).status == status
    page = await (await client.get("/ui/review")).text()
    assert 'action="/ui/login"' in page
    assert "items.json" not in page
    login = await client.post("/ui/login", data={"key": KEY}, allow_redirects=False)
    cookie = {"Cookie": f"{COOKIE}={login.cookies[COOKIE].value}", **json_type}
    assert (await client.request(method, path, data=body, headers=cookie)).status == 200
    keyed = {KEY_HEADER: KEY, **json_type}
    assert (await client.request(method, path, data=body, headers=keyed)).status == 200
    assert "items.json" in await (await client.get("/ui/review", headers=cookie)).text()


@pytest.mark.parametrize(
    ("auth", "how", "reviewer"),
    [
        pytest.param({"keys": [{"id": "ana", "secret_env": "TEST_REVIEW_KEYS"}]}, "header", "ana",
                     id="named_key_by_header"),
        pytest.param({"keys": [{"id": "ana", "secret_env": "TEST_REVIEW_KEYS"}]}, "session",
                     "ana", id="named_key_by_login_session"),
        pytest.param({"keys_env": "TEST_REVIEW_KEYS"}, "session", None,
                     id="unnamed_key_has_no_reviewer"),
    ],
)  # fmt: skip
async def test_a_label_records_the_reviewers_key_id(
    make_proxy: ProxyFactory,
    monkeypatch: pytest.MonkeyPatch,
    seeded: Path,
    results_path: Path,
    auth: dict[str, Any],
    how: str,
    reviewer: str | None,
) -> None:
    monkeypatch.setenv("TEST_REVIEW_KEYS", KEY)
    client = await _proxy(make_proxy, seeded, auth=auth)
    if how == "header":
        status, answer = await _post(
            client, {"item": DRAFT, "verdict": "pass"}, **{KEY_HEADER: KEY}
        )
    else:
        login = await client.post("/ui/login", data={"key": KEY}, allow_redirects=False)
        cookie = f"{COOKIE}={login.cookies[COOKIE].value}"
        status, answer = await _post(client, {"item": DRAFT, "verdict": "pass"}, Cookie=cookie)
    assert status == 200, answer
    assert read_rows(results_path)[-1]["reviewer"] == reviewer


@pytest.mark.usefixtures("pg_password")
async def test_with_the_rows_database_the_queue_reads_it_and_labels_go_there(
    make_proxy: ProxyFactory, postgres: PostgresServer, tmp_path: Path
) -> None:
    """With ``results.sink`` the queue reads the rows database and a label is a row there,
    through the same sink writer as every row (a real PostgreSQL)."""
    url = postgres.database()
    assert main(["db", "migrate", url]) == 0
    with psycopg.connect(url, password=PASSWORD) as conn:
        write_batch(conn, [columns_of(row, dumps(row).decode()) for row in seeded_rows()])
    drafts_path = write_jsonl(tmp_path / "drafts.jsonl", drafts())
    sink = {"sink": url, "sink_password_env": "PGPASSWORD", "spill_path": str(tmp_path / "s")}
    client = await _proxy(make_proxy, drafts_path, results=sink)
    data = await (await client.get("/ui/review/items.json")).json()
    assert [item["key"] for item in data["items"]][2:] == [f"row:{r}" for r in OFFERED]
    status, answer = await _post(client, {"item": "row:" + rid(4), "verdict": "fail"})
    assert status == 200, answer

    def stored() -> list[dict[str, Any]]:
        return [row for _, row in read_db(parse_url(url), password=PASSWORD)]

    for _ in range(200):  # the sink batches rows on its own thread
        rows = await asyncio.to_thread(stored)
        if len(rows) > len(seeded_rows()):
            break
        await asyncio.sleep(0.02)
    assert rows[-1] == answer["label"]
    again = await (await client.get("/ui/review/items.json")).json()
    assert again["reviewed"] == 1


@pytest.mark.parametrize(
    ("present", "index", "read"),
    [
        pytest.param(["grades.jsonl"], None, ["grades.jsonl"], id="one_process"),
        pytest.param(["grades.jsonl.2", "grades.jsonl.1", "grades.jsonl"], None,
                     ["grades.jsonl.2", "grades.jsonl.1", "grades.jsonl"],
                     id="rotations_oldest_first"),
        pytest.param(["grades.w0.jsonl", "grades.w1.jsonl", "grades.w1.jsonl.1"], 1,
                     ["grades.w0.jsonl", "grades.w1.jsonl.1", "grades.w1.jsonl"],
                     id="every_workers_file"),
        pytest.param(["grades.w1.jsonl", "grades.w12.jsonl", "other.w0.jsonl"], 1,
                     ["grades.w1.jsonl", "grades.w12.jsonl"], id="only_this_results_files"),
        pytest.param([], None, [], id="not_written_yet"),
    ],
)  # fmt: skip
def test_the_queue_reads_every_workers_results_file(
    tmp_path: Path, present: list[str], index: int | None, read: list[str]
) -> None:
    """A label is written by the worker that served the page, its row maybe by another: the
    queue reads every worker's file (and their rotations, oldest first)."""
    for name in present:
        (tmp_path / name).write_text("")
    mine = "grades.jsonl" if index is None else f"grades.w{index}.jsonl"
    config = build_config("http://127.0.0.1:9/v1", None, tmp_path / mine)
    assert [p.name for p in result_files(config, index)] == read


def _lines(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(dumps(row) + b"\n" for row in rows)


def _keys(items: RowItems, paths: list[Path]) -> tuple[list[str], list[str]]:
    got, labels = items.from_files(paths)
    return [item["key"] for item in got], [label["labels"] for label in labels]


def test_the_queue_reads_a_file_once_then_only_what_was_appended(tmp_path: Path) -> None:
    rows = seeded_rows()
    path = tmp_path / "grades.jsonl"
    path.write_bytes(_lines(rows[:2]))
    items = RowItems(1.0, 100)
    assert _keys(items, [path]) == ([f"row:{rid(1)}", f"row:{rid(2)}"], [])
    mark = label_row(labels=rid(1), draft=None, verdict="pass", at="2026-12-04T18:00:00+00:00")
    torn = _lines([rows[2]])
    with path.open("ab") as out:  # a label, then a row still being written (no newline yet)
        out.write(_lines([mark]) + torn[:20])
    assert _keys(items, [path]) == ([f"row:{rid(1)}", f"row:{rid(2)}"], [rid(1)])
    with path.open("ab") as out:
        out.write(torn[20:])
    assert _keys(items, [path])[0][-1] == f"row:{rid(3)}"
    # Rotation: the file moves to .1 and a new one starts; everything is read again, once.
    path.rename(tmp_path / "grades.jsonl.1")
    path.write_bytes(_lines([rows[3]]))
    again = _keys(items, [tmp_path / "grades.jsonl.1", path])
    assert again == ([f"row:{rid(n)}" for n in (1, 2, 3, 4)], [rid(1)])
    path.write_bytes(_lines([rows[4]]))  # cut and rewritten (shorter): read again
    assert _keys(items, [tmp_path / "grades.jsonl.1", path])[0][-1] == f"row:{rid(5)}"


def test_the_queue_keeps_the_newest_items(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "grades.jsonl", seeded_rows())
    assert _keys(RowItems(1.0, 2), [path])[0] == [f"row:{rid(4)}", f"row:{rid(5)}"]
