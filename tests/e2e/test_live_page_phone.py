"""The live page behind inbound keys, at a laptop's and a phone's width, in a real browser.

``gradeproxy demo`` with inbound keys set from the environment (``auth.keys_env``; the demo's
own client sends the first of them): the browser opens ``/ui``, gets the login form,
logs in with the other key, and then sees the same figures ``/metrics`` has (read with the key
header), with no console error, no failed request (the icon included) and nothing wider than
the screen. The sticky nav reaches the failure inspector; the chart draws the page's own polls;
the page's rounding equals the terminal's; a failing episode (a real replayed row, built into
the inspector's entry by the proxy's own code) shows its failed column.

Debian's ``/usr/bin/chromium`` through Playwright (never ``playwright install``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grader.rounding import percent
from tests.support.paths import REPO
from tests.support.process import free_port
from tests.support.tools import unavailable

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(300)]

ARTIFACTS = REPO / "artifacts"
CHROMIUM = Path(os.environ.get("GRADEPROXY_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]
WIDTHS = {"laptop": 1280, "phone": 390}
PAGE_KEY = "k-page-0123456789"
KEYS = f"k-demo-driver,{PAGE_KEY}"  # the demo's own client sends the first


def _missing(what: str) -> NoReturn:
    unavailable(f"{what} is not installed: run scripts/install-ci-tools.sh")


def get(url: str, key: str | None = PAGE_KEY) -> bytes:
    headers = {"X-Gradeproxy-Key": key} if key else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=5) as response:
        body: bytes = response.read()
        return body


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A keyed demo after its fixed batch: its base URL."""
    work = tmp_path_factory.mktemp("keyed-demo")
    port, log = free_port(), work / "demo.log"
    command = [sys.executable, "-m", "gradeproxy.cli", "demo", "--port", str(port), "--rounds", "1"]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GRADEPROXY_AUTH_KEYS_ENV": "TEST_PAGE_KEYS",
        "TEST_PAGE_KEYS": KEYS,
    }
    with (
        log.open("wb") as out,
        subprocess.Popen(
            [*command, "--results", str(work / "rows.jsonl")],
            cwd=work,
            env=env,
            stdout=out,
            stderr=out,
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 120
            while b"Serving." not in log.read_bytes():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the demo never finished its batch"
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        _missing(f"Debian's chromium ({CHROMIUM})")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (pip, in the [test] extra)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page in a fresh context (no cookies) whose console errors and failed requests are
    collected."""

    def __init__(self, browser: Any, width: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 800})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on(
            "console",
            lambda m: (
                self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on(
            "response",
            lambda r: self.problems.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )

    def log_in(self, base: str, key: str = PAGE_KEY) -> None:
        self.page.goto(f"{base}/ui")
        self.page.fill("#key", key)
        self.page.click("button[type=submit]")

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: Any, request: pytest.FixtureRequest) -> Iterator[Watched]:
    callspec = getattr(request.node, "callspec", None)
    width = WIDTHS[callspec.params.get("device", "phone") if callspec else "phone"]
    page = Watched(browser, width)
    yield page
    page.close()


def totals_from_metrics(base: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(get(f"{base}/metrics").decode()):
        for sample in family.samples:
            if sample.name == "gradeproxy_grades_total":
                counts[sample.labels["result"]] += int(sample.value)
    return counts


@pytest.mark.parametrize("device", list(WIDTHS))
def test_log_in_and_see_the_figures_at_each_width(demo: str, watched: Watched, device: str) -> None:
    page = watched.page
    page.goto(f"{demo}/ui")
    assert page.locator("form[action='/ui/login']").is_visible()
    assert page.locator("body[data-loaded]").count() == 0  # no figures before the login
    watched.log_in(demo)
    page.wait_for_selector("body[data-loaded]")
    counts = totals_from_metrics(demo)
    graded = sum(counts[r] for r in ("pass", "stale", "fail"))
    assert page.locator("#total-primary-graded .n").inner_text() == str(graded)
    for result in ("pass", "stale", "fail"):
        shown = page.locator(f"#total-primary-{result} .n").inner_text()
        assert shown == f"{percent(counts[result], graded)}% ({counts[result]})"
    assert page.locator("#failures details").count() > 0  # the session opens the inspector
    # The chart draws the page's own polls (two of them: it refreshes every 3 s).
    page.wait_for_function("document.querySelectorAll('#chart polyline').length === 2")
    assert page.locator("#chart").is_visible()
    # Nothing wider than the screen; the tables scroll inside their own boxes.
    assert page.evaluate("document.body.scrollWidth") <= WIDTHS[device]
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTHS[device]
    # A task id wraps after its dots at most, never inside one of its parts (it used to wrap
    # every 3 characters): each part's text lies on one line.
    broken = page.eval_on_selector_all(
        "#tasks tbody td:first-child",
        """cells => cells.filter((cell) => [...cell.childNodes].some((node) => {
            if (node.nodeType !== Node.TEXT_NODE || !node.textContent) return false;
            const range = document.createRange();
            range.selectNodeContents(node);
            return range.getClientRects().length > 1;
        })).map((cell) => cell.textContent)""",
    )
    assert broken == []
    # The sticky nav reaches the inspector from the top, and stays on screen there.
    page.click("nav a[href='#s-failures']")
    page.wait_for_timeout(300)
    inspector = page.locator("#s-failures h2").bounding_box()
    header = page.locator("header").bounding_box()
    assert inspector is not None
    assert header is not None
    assert header["y"] == 0
    assert 0 <= inspector["y"] < 800
    page.evaluate("window.scrollTo(0, 0)")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-keyed-{device}.png"))
    page.screenshot(path=str(ARTIFACTS / f"ui-keyed-{device}-full.png"), full_page=True)
    page.locator("#s-tasks").screenshot(path=str(ARTIFACTS / f"ui-keyed-{device}-tasks.png"))
    assert watched.problems == []


def test_a_wrong_key_gets_the_form_again(demo: str, watched: Watched) -> None:
    watched.log_in(demo, "k-wrong")
    assert watched.page.locator("form[action='/ui/login'] ~ *, .error").first.is_visible()
    assert "not valid" in watched.page.locator(".error").inner_text()
    assert watched.context.cookies() == []


def test_logging_out_returns_to_the_form(demo: str, watched: Watched) -> None:
    watched.log_in(demo)
    watched.page.wait_for_selector("body[data-loaded]")
    [cookie] = watched.context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/ui")
    assert PAGE_KEY not in cookie["value"]
    watched.page.click("#logout button")
    watched.page.wait_for_selector("form[action='/ui/login']")
    assert watched.context.cookies() == []


PERCENT_CASES = [(9, 16), (1, 16), (1, 8), (1, 3), (2, 3), (0, 7), (7, 7), (1, 2000), (1, 2001)]


def test_the_page_rounds_as_the_terminal_does(demo: str, watched: Watched) -> None:
    watched.log_in(demo)
    watched.page.wait_for_selector("body[data-loaded]")
    shown = watched.page.evaluate(
        "cases => cases.map(([n, d]) => pct(n, d))", [list(c) for c in PERCENT_CASES]
    )
    assert shown == [f"{percent(n, d)}%" for n, d in PERCENT_CASES]
    assert shown[0] == "56.3%"


@pytest.mark.parametrize("device", list(WIDTHS))
def test_a_failing_episode_is_shown_in_the_inspector(
    demo: str, watched: Watched, device: str, tmp_path: Path
) -> None:
    """A real replayed episode row with a forbidden delete, made into the inspector's entry by
    the proxy's own code, served as the inspector's JSON."""
    from gradeproxy.cli import main
    from grader.loader import load_tasks
    from proxy.pipeline.record.failures import FailureRing
    from tests.support.episodes import Step, chat

    task_id = "billing.duplicate_charge.episode"
    bad: list[Step] = [
        ("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"}),
        ("delete_payment", {"payment_id": "pay_1002"}, {"ok": True}),
    ]
    episodes = tmp_path / "episodes.jsonl"
    line = {"task_id": task_id, "episode_id": "ep-bad", "messages": chat(bad, "Refunded it.")}
    episodes.write_text(json.dumps(line) + "\n")
    out = tmp_path / "rows.jsonl"
    tasks_path = REPO / "config" / "tasks" / "episodes.jsonl"
    assert (
        main(["replay", "--tasks", str(tasks_path), "--episodes", str(episodes), "--out", str(out)])
        == 0
    )
    [row] = [json.loads(text) for text in out.read_text().splitlines()]
    ring = FailureRing(10, capture_answer=True)
    task = load_tasks(tasks_path).get(task_id)
    assert task is not None
    ring.add(task, row)
    snapshot = ring.snapshot()
    assert len(snapshot["failures"]) == 1
    page = watched.page
    page.route(
        "**/ui/failures.json",
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(snapshot)
        ),
    )
    watched.log_in(demo)
    entry = page.locator('#failures details[data-task="billing.duplicate_charge.episode"]')
    entry.wait_for()
    assert "episode ep-bad" in entry.locator("summary").inner_text()
    assert "1 shown, 1 seen" in page.locator("#inspector-note").inner_text()
    entry.locator("summary").click()
    column = entry.locator('tr[data-column="authority_ok"]')
    assert column.locator("td.fail").inner_text() == "fail"
    assert "'delete_payment' is not an allowed action" in column.inner_text()
    assert page.evaluate("document.body.scrollWidth") <= WIDTHS[device]
    ARTIFACTS.mkdir(exist_ok=True)
    entry.screenshot(path=str(ARTIFACTS / f"ui-episode-failure-{device}.png"))
    assert watched.problems == []
