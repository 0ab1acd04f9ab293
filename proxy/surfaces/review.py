"""The review queue: ``/ui/review`` (a page), ``/ui/review/items.json``, ``/ui/review/label``.

People label what a machine cannot settle: task drafts (``review.drafts_path``, written by
``gradeproxy tasks draft``), a sample of judge-graded rows (``review.judged_sample``, by a hash
of ``row_id``, so every worker offers the same rows), every row whose judge answer could not be
parsed and every row with an advisory column. A label is a row of its own (``kind: "label"``,
grader/labels.py) appended through the process's own results writer on its writer thread (the
JSONL file, with ``--workers`` the file of the worker that served the page, or the rows
database sink), never an edit of the labelled row; the queue reads the labels back from the
same rows, so a reload shows them.

Who may: with inbound keys (``auth.keys_env``) only a request with a key or the page's login
session; without keys the admin port or a loopback client, as the failure inspector. The post
is JSON only (a form cannot send it cross-site without a preflight), and a browser's
``Origin`` / ``Sec-Fetch-Site`` must name this origin; the session cookie is ``SameSite=Strict``
(proxy/uisession.py). An edited expected call is checked against the draft's tools before it is
stored (grader/labels.py :func:`~grader.labels.checked_expected`); a bad one is a 400 with the
reason.

Never here: writing any row but a label, reading request traffic, the event loop doing file or
database reads (they run in a thread).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from grader.labels import (
    LabelError,
    checked_expected,
    is_label,
    judge_verdict,
    label_row,
    latest_labels,
    sampled,
)
from proxy.config import Config
from proxy.pipeline.guard import KEY_ID, Guard
from proxy.pipeline.record.results import ResultsWriteError, jsonl_pieces
from proxy.pipeline.record.sinks import RowWriter
from proxy.state import CONFIG, QUEUE_SLOT, WORKER
from proxy.surfaces.login import login_form, signed_in
from proxy.utctime import utc_iso

REVIEW_PAGE = files("proxy.surfaces").joinpath("review.html").read_bytes()
ANSWER_SHOWN = 4000  # characters of an answer the page shows (the row holds all of it)


def reviewer_of(request: web.Request) -> str | None:
    """The reviewer's key id, recorded with each label: the named key (``auth.keys``) the
    request or its login session was let in with (proxy/pipeline/guard.py's ``KEY_ID``); None
    without auth or for a key of ``auth.keys_env``, which has no id."""
    return request.get(KEY_ID)


@dataclass(frozen=True, slots=True)
class Queue:
    """The items to review (in a fixed order: drafts, then rows as written) and their labels."""

    items: list[dict[str, Any]]
    labels: dict[tuple[str, str], dict[str, Any]]
    problems: list[str]

    def find(self, key: str) -> dict[str, Any] | None:
        return next((item for item in self.items if item["key"] == key), None)


def result_files(config: Config, worker_index: int | None) -> list[Path]:
    """The result files to read, oldest rotation first: with several workers every worker's
    (``grades.w*.jsonl``: a label may be in another worker's file than its row)."""
    path = config.results.path
    if path is None:
        return []
    paths = [path]
    if worker_index is not None:
        pattern = re.sub(rf"\.w{worker_index}(?=\.|$)", ".w*", path.name, count=1)
        paths = sorted(path.parent.glob(pattern)) or [path]
    out: list[Path] = []
    for each in paths:
        cut = len(each.name) + 1
        rotated = sorted(
            (p for p in each.parent.glob(f"{each.name}.*") if p.name[cut:].isdigit()),
            key=lambda p: -int(p.name[cut:]),
        )
        out += [*rotated, each]
    return [p for p in out if p.exists()]


def _file_rows(path: Path) -> Iterator[Any]:
    with path.open("rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    yield orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a cut line (a crash): the queue skips it as every reader does


def _database_rows(config: Config) -> Iterator[Any]:
    from proxy.rowsdb import parse_url, read_rows

    results = config.results
    password = None
    if results.sink_password_env is not None:
        password = os.environ.get(results.sink_password_env)
    elif results.sink_password_file is not None:
        password = results.sink_password_file.read_text(encoding="utf-8").strip()
    assert results.sink is not None
    for _, row in read_rows(parse_url(results.sink), password=password):
        yield row


class RowItems:
    """The queue's items from result rows, kept between page loads: a file is read once, then
    only the lines appended since (a label post must not read a 100 MB file again); a file
    that was replaced or cut (rotation, a new worker file) makes it read everything again.
    The rows database is read whole each time. Thread-safe: requests refresh it in threads."""

    def __init__(self, judged_sample: float, max_items: int) -> None:
        self.judged_sample = judged_sample
        self.max_items = max_items
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[int, int, int]] = {}  # path -> (device, inode, offset)
        self._items: deque[dict[str, Any]] = deque(maxlen=max_items)
        self._labels: list[dict[str, Any]] = []

    def _take(self, row: Any) -> None:
        if is_label(row):
            self._labels.append(row)
        elif (item := row_item(row, self.judged_sample)) is not None:
            self._items.append(item)

    def _reset(self) -> None:
        self._read, self._labels = {}, []
        self._items = deque(maxlen=self.max_items)

    def from_files(self, paths: list[Path]) -> tuple[list[dict[str, Any]], list[Any]]:
        """The items and label rows in ``paths`` (oldest first), reading only what is new."""
        with self._lock:
            now = {}
            for path in paths:
                stat = path.stat()
                now[path] = (stat.st_dev, stat.st_ino, stat.st_size)
            changed = any(
                path not in now or now[path][:2] != seen[:2] or now[path][2] < seen[2]
                for path, seen in self._read.items()
            )
            if changed:
                self._reset()
            for path in paths:
                device, inode, size = now[path]
                offset = self._read.get(path, (device, inode, 0))[2]
                if size > offset:
                    offset += self._read_from(path, offset, size)
                self._read[path] = (device, inode, offset)
            return list(self._items), list(self._labels)

    def _read_from(self, path: Path, offset: int, size: int) -> int:
        """Take the whole lines of ``path`` between ``offset`` and ``size``; the bytes used
        (a line still being written is left for the next read)."""
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(size - offset)
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            if line.strip():
                try:
                    self._take(orjson.loads(line))
                except orjson.JSONDecodeError:
                    continue  # a cut line (a crash): the queue skips it as every reader does
        return end

    def from_rows(self, rows: Iterator[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
        """The items and label rows of ``rows`` (the rows database: read whole)."""
        with self._lock:
            self._reset()
            for row in rows:
                self._take(row)
            return list(self._items), list(self._labels)


def read_queue(config: Config, worker_index: int | None, items: RowItems) -> Queue:
    """The queue as the rows and the drafts file say now (blocking: called in a thread)."""
    review = config.review
    problems: list[str] = []
    from_rows: list[dict[str, Any]] = []
    labels: list[Any] = []
    try:
        if config.results.sink is not None:
            from_rows, labels = items.from_rows(_database_rows(config))
        else:
            from_rows, labels = items.from_files(result_files(config, worker_index))
    except Exception as exc:  # an unreadable file or database: said on the page, not a 500
        problems.append(f"result rows: {exc}")
    queue: list[dict[str, Any]] = []
    try:
        queue += _draft_items(review.drafts_path)
    except Exception as exc:
        problems.append(f"review.drafts_path: {exc}")
    queue += [dict(item) for item in from_rows]  # the kept items are never changed
    latest = latest_labels(labels)
    for item in queue:
        item["label"] = latest.get(_key_of(item["key"]))
    return Queue(queue, latest, problems)


def _key_of(key: str) -> tuple[str, str]:
    kind, _, name = key.partition(":")
    return kind, name


def _draft_items(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for draft in _file_rows(path):
        task_id = draft.get("id") if isinstance(draft, dict) else None
        if not isinstance(task_id, str) or task_id in seen:
            continue
        seen.add(task_id)
        expected = draft.get("expected")
        metadata = draft.get("metadata") if isinstance(draft.get("metadata"), dict) else {}
        items.append(
            {
                "key": f"draft:{task_id}",
                "type": "draft",
                "task_id": task_id,
                "row_id": None,
                "prompt": draft.get("prompt"),
                "tools": draft.get("tools") if isinstance(draft.get("tools"), list) else [],
                "expected": expected if isinstance(expected, list) else [expected],
                "stale": metadata.get("stale"),
                "count": _draft_count(metadata),
            }
        )
    return items


def _draft_count(metadata: dict[str, Any]) -> Any:
    provenance = metadata.get("draft")
    return provenance.get("count") if isinstance(provenance, dict) else None


def row_item(row: Any, judged_sample: float) -> dict[str, Any] | None:
    """A result row's queue item, or None when it is not one to review: a row whose judge
    answer could not be parsed, a row with an advisory column, a judged row in the sample."""
    if not isinstance(row, dict) or row.get("kind", "answer") != "answer":
        return None
    row_id = row.get("row_id")
    checks = row.get("checks")
    if not isinstance(row_id, str):
        return None
    columns = [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
    if any(c.get("reason_code") == "judge_parse_error" for c in columns):
        kind = "judge_parse_error"
    elif any(c.get("advisory") is True for c in columns):
        kind = "advisory"
    elif judge_verdict(row) is not None and sampled(row_id, judged_sample):
        kind = "judged"
    else:
        return None
    answer = row.get("answer")
    return {
        "key": f"row:{row_id}",
        "type": kind,
        "task_id": row.get("task_id"),
        "row_id": row_id,
        "model": row.get("model"),
        "time": row.get("time"),
        "result": row.get("result"),
        "judge": judge_verdict(row),
        "call": row.get("call"),
        "answer": answer[:ANSWER_SHOWN] if isinstance(answer, str) else answer,
        "columns": [
            {
                "name": c.get("name"),
                "type": c.get("type"),
                "passed": c.get("passed"),
                "reason": c.get("reason"),
                "reason_code": c.get("reason_code"),
                "advisory": c.get("advisory", False),
            }
            for c in columns
        ],
    }


def append_label(writer: RowWriter, row: dict[str, Any]) -> None:
    """Append one label row (on the writer thread); raise what kept it out."""
    (failed,) = writer.append_many([(jsonl_pieces([row]), 1)])
    if failed is not None:
        raise failed


def _same_origin(request: web.Request) -> bool:
    """A browser's post names this origin (``Origin``, ``Sec-Fetch-Site``); a client that is
    no browser (curl with the key header) sends neither."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


def _error(status: int, reason: str) -> web.Response:
    headers = {"Cache-Control": "no-store"}
    return web.json_response({"error": reason}, status=status, headers=headers)


def add_review_routes(
    target: web.Application,
    proxy_app: web.Application,
    guard: Guard | None,
    inspector: Callable[[web.Request], bool],
) -> None:
    """The review page and its JSON on ``target`` (the admin app, or the proxy app);
    ``inspector`` is the failure inspector's rule (proxy/surfaces/ui.py), used without keys."""
    keyed = guard is not None and guard.keyed

    def allowed(request: web.Request) -> bool:
        if keyed and guard is not None:
            return signed_in(request, guard)
        return inspector(request)

    def worker_index() -> int | None:
        worker = proxy_app.get(WORKER)
        return worker.index if worker is not None and worker.count > 1 else None

    review = proxy_app[CONFIG].review
    kept = RowItems(review.judged_sample, review.max_items)

    async def queue_now() -> Queue:
        return await asyncio.to_thread(read_queue, proxy_app[CONFIG], worker_index(), kept)

    async def page(request: web.Request) -> web.Response:
        if keyed and guard is not None and not signed_in(request, guard):
            body = login_form()
        elif not allowed(request):
            return _error(403, "the review queue is on the admin port or this machine (loopback)")
        else:
            body = REVIEW_PAGE
        return web.Response(
            body=body, content_type="text/html", charset="utf-8",
            headers={"Cache-Control": "no-store"},
        )  # fmt: skip

    async def items(request: web.Request) -> web.Response:
        if not allowed(request):
            return _error(403, "log in at /ui first (auth.keys_env), or use the admin port")
        queue = await queue_now()
        reviewed = sum(1 for item in queue.items if item["label"] is not None)
        body = {
            "items": queue.items,
            "total": len(queue.items),
            "reviewed": reviewed,
            "problems": queue.problems,
            "writable": _writer(proxy_app) is not None,
        }
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    async def label(request: web.Request) -> web.Response:
        if not allowed(request):
            return _error(403, "log in at /ui first (auth.keys_env), or use the admin port")
        if not _same_origin(request):
            return _error(403, "a label is posted from the review page itself (same origin)")
        if request.content_type != "application/json":
            return _error(415, "send the label as JSON (Content-Type: application/json)")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("item"), str):
            return _error(400, 'expected {"item": "row:<row_id>" | "draft:<task id>", "verdict"}')
        writer = _writer(proxy_app)
        if writer is None:
            return _error(503, "labels are rows: set results.path or results.sink")
        queue = await queue_now()
        item = queue.find(body["item"])
        if item is None:
            return _error(404, f"no item {body['item']!r} in the review queue")
        kind, name = _key_of(item["key"])
        note = body.get("note")
        if isinstance(note, str):
            note = note.strip() or None
        try:
            expected = None
            if body.get("verdict") == "edit":
                if kind != "draft":
                    raise LabelError("only a draft's expected call can be edited")
                expected = checked_expected(body.get("expected"), item["tools"])
            row = label_row(
                labels=name if kind == "row" else None,
                draft=name if kind == "draft" else None,
                verdict=str(body.get("verdict")),
                expected=expected,
                note=note,
                reviewer=reviewer_of(request),
                at=utc_iso(time.time()),
            )
        except LabelError as exc:
            return _error(400, str(exc))
        slot = proxy_app[QUEUE_SLOT].queue
        assert slot is not None
        try:
            await slot.writes.run(append_label, writer, row)
        except ResultsWriteError as exc:
            return _error(503, f"the label was not stored: {exc.message}")
        return web.json_response(
            {"label": row, "key": item["key"]}, headers={"Cache-Control": "no-store"}
        )

    target.router.add_get("/ui/review", page)
    target.router.add_get("/ui/review/items.json", items)
    target.router.add_post("/ui/review/label", label)


def _writer(proxy_app: web.Application) -> RowWriter | None:
    queue = proxy_app[QUEUE_SLOT].queue
    return queue.writer if queue is not None else None
