"""The live page in a real browser: Debian's chromium, driven by Playwright.

A fixed batch of demo traffic (``gradeproxy demo --rounds 1``: every sample task, streamed and
not), then, once the queue is empty and every row is written: the numbers the page shows equal
``/metrics`` and the result rows, a failing answer opens on its first differing path, and at a
laptop's and a phone's width nothing scrolls sideways and the totals are on screen; replayed
episodes show in the Episodes section and a task's error rate in its row. Screenshots
land in ``artifacts/`` (git-ignored; CI keeps them).

The browser is Debian's ``/usr/bin/chromium`` (scripts/install-ci-tools.sh installs it), never
one ``playwright install`` downloads (tests/support/browser.py, shared with the review page's
test). Under ``CI=true`` a missing browser fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grader.rounding import percent
from tests.support.browser import ARTIFACTS, browser_context
from tests.support.paths import REPO
from tests.support.process import free_port

__all__ = ["browser_context"]  # the shared fixture, imported to be used here

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(300)]

WIDTHS = {"laptop": 1280, "phone": 390}


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The demo, after its fixed batch: (base URL, result rows file)."""
    work = tmp_path_factory.mktemp("demo")
    rows, port, log = work / "rows.jsonl", free_port(), work / "demo.log"
    command = [sys.executable, "-m", "gradeproxy.cli", "demo", "--port", str(port), "--rounds", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with (
        log.open("wb") as out,
        subprocess.Popen(
            [*command, "--results", str(rows)], cwd=work, env=env, stdout=out, stderr=out
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 120
            while b"Serving." not in log.read_bytes():  # printed after the queue drained
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the demo never finished its batch"
                time.sleep(0.2)
            base = f"http://127.0.0.1:{port}"
            written = len(rows.read_text().splitlines())
            board = json.loads(get(f"{base}/ui/scoreboard.json"))
            assert (board["queue_depth"], board["rows_written"]) == (0, written)
            yield base, rows
        finally:
            process.terminate()
            process.wait(timeout=30)


def metric_counts(base: str) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(get(f"{base}/metrics").decode()):
        for sample in family.samples:
            if sample.name == "gradeproxy_grades_total":
                counts[(sample.labels["task"], sample.labels["result"])] += int(sample.value)
    return counts


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def shown_numbers(page: Any) -> dict[tuple[str, str], int]:
    """(task, column) -> the count the task table shows."""
    cells: dict[tuple[str, str], int] = {}
    for row in page.locator("#tasks tbody tr").all():
        task = row.get_attribute("data-key")
        for column in ("graded", "pass", "stale", "fail", "error"):
            text = row.locator(f'td[data-col="{column}"]').inner_text()
            match = re.match(r"\s*(\d+)", text)
            assert match, f"{task} {column}: {text!r}"
            cells[(task, column)] = int(match.group(1))
    return cells


def settled_box(page: Any, selector: str, polls: int = 50) -> Any:
    """The element's box once it is laid out. The page redraws its cards on every poll: an
    element found visible can be replaced before its box is read, which then reads None, so
    the read is retried (bounded) rather than trusted once."""
    box = None
    for _ in range(polls):
        page.wait_for_selector(selector, state="visible")
        box = page.locator(selector).bounding_box()
        if box is not None:
            return box
        page.wait_for_timeout(100)
    return box


@pytest.mark.parametrize("device", list(WIDTHS))
def test_numbers_shown_equal_metrics_and_rows(
    demo: tuple[str, Path], browser_context: Any, device: str
) -> None:
    base, rows_path = demo
    page = browser_context.new_page()
    page.set_viewport_size({"width": WIDTHS[device], "height": 760})
    page.goto(f"{base}/ui")
    page.wait_for_selector("body[data-loaded]")
    shown = shown_numbers(page)
    from_metrics = metric_counts(base)
    from_rows = Counter((r["task_id"], r["result"]) for r in read_rows(rows_path))
    tasks = {task for task, _ in from_rows}
    assert {task for task, _ in shown} == tasks
    for task in tasks:
        for result in ("pass", "stale", "fail"):
            assert (
                shown[(task, result)] == from_metrics[(task, result)] == from_rows[(task, result)]
            )
        assert shown[(task, "error")] == from_rows[(task, "error")]  # out of the grades metric
        assert shown[(task, "graded")] == sum(
            from_rows[(task, r)] for r in ("pass", "stale", "fail")
        )
    total = sum(from_rows.values())
    passed = sum(n for (_, result), n in from_rows.items() if result == "pass")
    assert page.locator("#total-primary-graded .n").inner_text() == str(total)
    assert page.locator("#total-primary-pass .n").inner_text() == (
        f"{percent(passed, total)}% ({passed})"
    )
    # No sideways scrolling, and the totals are on screen without it.
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= WIDTHS[device]
    for card in ("graded", "pass", "stale", "fail"):
        # On a loaded machine the cards may lay out a moment after the data arrived.
        box = settled_box(page, f"#total-primary-{card}")
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= WIDTHS[device]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-{device}.png"), full_page=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-{device}-top.png"))  # what the reader sees first
    page.close()


@pytest.mark.parametrize("device", list(WIDTHS))
def test_a_failing_answer_opens_on_its_first_difference(
    demo: tuple[str, Path], browser_context: Any, device: str
) -> None:
    base, rows_path = demo
    wanted = {
        r["request_id"]: r
        for r in read_rows(rows_path)
        if r["result"] == "fail" and r["reason_code"] == "value_mismatch"
    }
    assert wanted, "the demo batch has value mismatches"
    page = browser_context.new_page()
    page.set_viewport_size({"width": WIDTHS[device], "height": 900})
    page.goto(f"{base}/ui")
    page.wait_for_selector("#failures details")
    entry = None
    for details in page.locator('#failures details[data-result="fail"]').all():
        request_id = (details.get_attribute("data-id") or "").split("/")[0]
        if request_id in wanted:
            entry = details
            break
    assert entry is not None, "a value mismatch is in the inspector"
    row = wanted[request_id]
    entry.locator("summary").click()
    assert entry.locator("mark.path").inner_text() == row["path"]
    highlighted = entry.locator("pre.call .diff").first
    assert highlighted.is_visible()
    assert highlighted.get_attribute("data-path") == row["path"]
    assert entry.locator("pre.answer").inner_text() == row["answer"]
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[device]
    ARTIFACTS.mkdir(exist_ok=True)
    entry.screenshot(path=str(ARTIFACTS / f"ui-failure-{device}.png"))
    page.close()


def test_the_page_refreshes_itself(demo: tuple[str, Path], browser_context: Any) -> None:
    """One more graded request: the open page shows it without a reload."""
    base, rows_path = demo
    page = browser_context.new_page()
    page.goto(f"{base}/ui")
    page.wait_for_selector("body[data-loaded]")
    before = int(page.locator("#total-primary-graded .n").inner_text())
    task = json.loads((REPO / "config" / "tasks" / "sample.jsonl").read_text().splitlines()[0])
    body = {
        "model": "gradeproxy-demo",
        "messages": [{"role": "user", "content": task["prompt"]}],
        "tools": task["tools"],
    }
    request = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Grade-Task": task["id"]},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    page.wait_for_function(
        f"document.querySelector('#total-primary-graded .n').textContent === '{before + 1}'",
        timeout=15000,
    )
    deadline = time.monotonic() + 15  # leave the rows file settled for the other tests
    while len(read_rows(rows_path)) != before + 1:
        assert time.monotonic() < deadline, "the row was never written"
        time.sleep(0.1)
    page.close()


def test_invisible_characters_are_marked(demo: tuple[str, Path], browser_context: Any) -> None:
    """The page marks what the ring made visible: edge spaces, a tab, a zero-width space, a
    newline (the ring's own snapshot of a crafted answer, served in place of this process's)."""
    from grader.loader import parse_task
    from proxy.pipeline.record.failures import FailureRing

    base, _ = demo
    ring = FailureRing(5, capture_answer=True)
    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"a": 1}}})
    answer = "  I can't\tdo\u200bthat\n"
    ring.add(task, {"request_id": "r1", "result": "fail", "answer": answer, "call": None})
    page = browser_context.new_page()
    page.route(
        "**/ui/failures.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(ring.snapshot())
        ),
    )
    page.goto(f"{base}/ui")
    entry = page.locator('#failures details[data-task="t"]')
    entry.locator("summary").click()
    marked = entry.locator("pre.answer .inv").all_inner_texts()
    assert marked == ["··", "\\t", "\\u200b", "\\n"]
    assert entry.locator("pre.answer").inner_text() == "··I can't\\tdo\\u200bthat\\n\n"
    page.close()


def test_an_enforced_answer_says_what_was_done(
    demo: tuple[str, Path], browser_context: Any
) -> None:
    """An answer a policy blocked is in the inspector whatever its grade, and says so
    (docs/enforce.md): the action, the check, the reason and what the client received."""
    from grader.loader import parse_task
    from proxy.pipeline.record.failures import FailureRing

    base, _ = demo
    ring = FailureRing(5, capture_answer=True)
    task = parse_task({"id": "t", "expected": {"name": "f", "arguments": {"a": 1}}})
    enforcement = {
        "mode": "block",
        "action": "block",
        "check": "no_delete",
        "reason": "forbidden call 'delete_payment' (matches 'delete_*')",
        "received": "blocked",
    }
    row = {"request_id": "r1", "result": "pass", "answer": "{}", "call": None}
    ring.add(task, {**row, "enforcement": enforcement})
    page = browser_context.new_page()
    page.route(
        "**/ui/failures.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(ring.snapshot())
        ),
    )
    page.goto(f"{base}/ui")
    entry = page.locator('#failures details[data-task="t"]')
    assert "enforced: block" in entry.locator("summary").inner_text()
    entry.locator("summary").click()
    assert entry.locator("div.enforced").inner_text() == (
        "enforced (block): block by no_delete: forbidden call 'delete_payment' (matches "
        "'delete_*'); the client received the answer blocked"
    )
    page.close()


@pytest.mark.parametrize("device", list(WIDTHS))
def test_episodes_are_shown_with_their_columns(
    demo: tuple[str, Path], browser_context: Any, device: str, tmp_path: Path
) -> None:
    """Two replayed episodes (one passing, one with a forbidden delete) counted into a registry
    the way the grade queue counts them; the page shows that registry's episode numbers."""
    from gradeproxy.cli import main
    from proxy.pipeline.record.metrics import ProxyMetrics
    from proxy.surfaces.ui import scoreboard
    from tests.support.episodes import GOOD_BILLING, GOOD_BILLING_FINAL, Step, chat

    task = "billing.duplicate_charge.episode"
    bad: list[Step] = [
        ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"}),
        ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True}),
    ]
    episodes = tmp_path / "episodes.jsonl"
    lines = [
        {"task_id": task, "episode_id": "good", "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL)},
        {"task_id": task, "episode_id": "bad", "messages": chat(bad, "Refunded it.")},
    ]
    episodes.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "rows.jsonl"
    tasks = REPO / "config" / "tasks" / "episodes.jsonl"
    assert (
        main(["replay", "--tasks", str(tasks), "--episodes", str(episodes), "--out", str(out)]) == 0
    )
    metrics = ProxyMetrics()
    for row in read_rows(out):
        metrics.episode_done(task, row)
    base, _ = demo
    board = {**json.loads(get(f"{base}/ui/scoreboard.json")), **scoreboard(metrics)}
    [expected] = board["episodes"]
    assert (expected["pass"], expected["fail"]) == (1, 1)
    page = browser_context.new_page()
    page.set_viewport_size({"width": WIDTHS[device], "height": 760})
    page.route(
        "**/ui/scoreboard.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(board)
        ),
    )
    page.goto(f"{base}/ui")
    page.wait_for_selector("#episodes table", state="visible")
    table = page.locator(f'#episodes table[data-task="{task}"]')
    for name, counts in [("episodes", expected), *expected["columns"].items()]:
        row = table.locator(f'tr[data-row="{name}"]')
        for result in ("pass", "fail", "error"):
            text = row.locator(f'td[data-col="{result}"]').inner_text()
            assert int(text.split()[0]) == counts[result], (name, result, text)
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[device]
    box = table.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= WIDTHS[device]
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#episodes").screenshot(path=str(ARTIFACTS / f"ui-episodes-{device}.png"))
    page.close()


@pytest.mark.parametrize(
    ("passed", "errors", "shown"),
    [
        pytest.param(1, 2, "2 66.7%", id="errors_over_all_rows"),
        pytest.param(3, 0, "0 0.0%", id="no_errors"),
        pytest.param(0, 1, "1 100.0%", id="only_errors"),
    ],
)
def test_a_task_shows_its_error_rate(
    demo: tuple[str, Path], browser_context: Any, passed: int, errors: int, shown: str
) -> None:
    """The task row's error cell: error rows over all rows (errors are out of "graded")."""
    from proxy.pipeline.record.metrics import ProxyMetrics
    from proxy.surfaces.ui import scoreboard

    metrics = ProxyMetrics()
    metrics.task_info.labels("t.err", "none").set(1)
    if passed:
        metrics.child(metrics.grades, "t.err", "m", "pass", "primary").inc(passed)
    if errors:
        metrics.child(metrics.grade_errors, "t.err", "primary").inc(errors)
    base, _ = demo
    board = {**json.loads(get(f"{base}/ui/scoreboard.json")), **scoreboard(metrics)}
    page = browser_context.new_page()
    page.set_viewport_size({"width": WIDTHS["phone"], "height": 760})
    page.route(
        "**/ui/scoreboard.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(board)
        ),
    )
    page.goto(f"{base}/ui")
    row = page.locator('#tasks tbody tr[data-key="t.err"]')
    assert row.locator('td[data-col="error"]').inner_text() == shown
    assert row.locator('td[data-col="graded"]').inner_text() == str(passed)
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS["phone"]
    page.close()
