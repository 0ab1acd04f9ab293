"""The review queue in a real browser: Debian's chromium, driven by Playwright.

A ``gradeproxy serve`` process with inbound keys, an admin port, a results file holding judged
rows (hostile task ids and answers among them) and a drafts file. The reviewer logs in through
the page's form, labels items by keyboard only (one item a screen, progress shown), writes a
hostile note, edits a draft's expected call (a call the draft's tools refuse first: the reason
is shown and nothing stored), reloads: the labels are still there, as label rows appended to
the results file, and ``gradeproxy calibrate --results`` counts them. No string from a row, a
draft or a note ever runs as HTML. Screenshots land in ``artifacts/``.

The browser fixture is the live page's (tests/support/browser.py): Debian's chromium through
Playwright's ``executable_path``, never a browser ``playwright install`` downloads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from tests.support.browser import ARTIFACTS, browser_context
from tests.support.files import write_jsonl
from tests.support.paths import REPO
from tests.support.process import free_port
from tests.support.proxy import read_rows
from tests.support.review import HOSTILE, UNICODE, drafts, rid, seeded_rows

__all__ = ["browser_context"]  # the shared fixture, imported to be used here

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.timeout(300)]

KEY = "k-review-0123456789"
JUDGE = "judge-2024-08-06"
NOTE = HOSTILE + " caf\u00e9 \U0001f600"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A keyed ``serve`` with the review queue on its admin port: (admin base URL, rows file).
    One per test: each starts from the same unlabelled rows."""
    work = tmp_path
    rows = write_jsonl(work / "grades.jsonl", seeded_rows())
    drafts_file = write_jsonl(work / "drafts.jsonl", drafts())
    port, admin, log = free_port(), free_port(), work / "serve.log"
    config = work / "proxy.yaml"
    config.write_text(
        f"upstream:\n  url: http://127.0.0.1:{free_port()}/v1\n"
        f"listen:\n  port: {port}\n"
        f"admin:\n  port: {admin}\n"
        f"tasks:\n  path: {REPO / 'config' / 'tasks' / 'sample.jsonl'}\n"
        f"results:\n  path: {rows}\n"
        "auth:\n  keys_env: REVIEW_TEST_KEYS\n"
        f"review:\n  drafts_path: {drafts_file}\n  judged_sample: 1.0\n"
        "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 2\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "REVIEW_TEST_KEYS": KEY}
    command = [sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config)]
    with log.open("wb") as out, subprocess.Popen(command, env=env, stdout=out, stderr=out) as proc:
        try:
            base = f"http://127.0.0.1:{admin}"
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    with urllib.request.urlopen(f"{base}/livez", timeout=2):
                        break
                except OSError:
                    assert time.monotonic() < deadline, "serve never answered /livez"
                    time.sleep(0.1)
            yield base, rows
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def progress(page: Any) -> str:
    return str(page.locator("#progress").inner_text())


def wait_progress(page: Any, text: str) -> None:
    page.wait_for_function("(t) => document.getElementById('progress').textContent === t", arg=text)


def wait_message(page: Any, words: str) -> None:
    page.wait_for_function(
        "(w) => document.getElementById('message').textContent.includes(w)", arg=words
    )


def assert_nothing_ran(page: Any) -> None:
    """No hostile string became markup: no script ran, no image was made from text."""
    assert page.evaluate("window.pwned") is None
    assert page.locator("#item img, #item script").count() == 0


def test_label_by_keyboard_edit_a_draft_reload_and_calibrate(
    served: tuple[str, Path], browser_context: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base, rows_path = served
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1100, "height": 800})
    page.goto(f"{base}/ui/review")
    # Keys are set: the page is the login form until the key is given.
    page.fill("#key", KEY)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/ui")
    page.goto(f"{base}/ui/review")
    page.wait_for_selector("body[data-loaded]")
    assert progress(page) == "0 of 7 reviewed"
    assert page.locator("#type").inner_text() == "draft"
    assert page.locator("#prompt").text_content() == f"Open a ticket: {HOSTILE}"

    # 1. The first draft: pass. The view moves on by itself.
    page.keyboard.press("p")
    wait_progress(page, "1 of 7 reviewed")
    # 2. The hostile draft: its id is text, exactly as written; a hostile note, then fail.
    assert page.locator("#task").text_content() == f"draft.{HOSTILE}"
    page.keyboard.press("n")
    page.keyboard.type(NOTE)
    page.keyboard.press("Escape")
    page.keyboard.press("f")
    wait_progress(page, "2 of 7 reviewed")
    # 3-5. Judged rows 1 (judge pass), 2 (judge fail, hostile id and answer), 3 (judge pass).
    assert page.locator("#row-id").inner_text() == rid(1)
    page.keyboard.press("p")
    wait_progress(page, "3 of 7 reviewed")
    assert page.locator("#task").text_content() == f"judged.{HOSTILE}"
    assert page.locator("#answer").text_content() == HOSTILE + UNICODE
    assert_nothing_ran(page)
    page.keyboard.press("f")
    wait_progress(page, "4 of 7 reviewed")
    page.keyboard.press("f")
    wait_progress(page, "5 of 7 reviewed")
    assert page.locator("#type").inner_text() == "judge_parse_error"
    page.keyboard.press("e")  # only a draft can be edited: said, nothing stored
    wait_message(page, "only a draft's expected call can be edited")

    # Back to the first draft: edit its expected call. A call the tools refuse is not stored.
    for _ in range(5):
        page.keyboard.press("k")
    assert page.locator("#task").text_content() == "draft.0a1b2c3d.4e5f6a7b"
    page.keyboard.press("e")
    editor = page.locator("#editor")
    assert editor.is_visible()
    bad = {"name": "create_ticket", "arguments": {"title": "Jam", "priority": "urgent"}}
    editor.fill(json.dumps(bad))
    page.keyboard.press("Control+Enter")
    wait_message(page, "'urgent' is not one of")
    good = {"name": "create_ticket", "arguments": {"title": "Printer jam", "priority": "high"}}
    editor.fill(json.dumps(good))
    page.keyboard.press("Control+Enter")
    wait_message(page, "edit: saved")
    assert json.loads(page.locator("#expected").inner_text()) == [good]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "review-edit.png"), full_page=True)

    # Reload: every label is still there, read back from the rows.
    page.reload()
    page.wait_for_selector("body[data-loaded]")
    assert progress(page) == "5 of 7 reviewed"
    assert page.locator("#type").inner_text() == "judge_parse_error"  # the first unreviewed
    for _ in range(5):
        page.keyboard.press("ArrowLeft")
    assert page.locator("#label .label-now").inner_text() == "edit"
    assert json.loads(page.locator("#expected").inner_text()) == [good]
    page.keyboard.press("ArrowRight")
    assert page.locator("#label-note").text_content() == NOTE
    assert page.locator("#note").input_value() == NOTE
    assert_nothing_ran(page)
    page.screenshot(path=str(ARTIFACTS / "review-hostile.png"), full_page=True)
    page.close()

    # The labels are rows of their own, appended; the labelled rows are as they were.
    rows = read_rows(rows_path)
    assert rows[: len(seeded_rows())] == seeded_rows()
    labels = [r for r in rows if r["kind"] == "label"]
    assert [(r["labels"], r["draft"], r["verdict"]) for r in labels] == [
        (None, "draft.0a1b2c3d.4e5f6a7b", "pass"),
        (None, f"draft.{HOSTILE}", "fail"),
        (rid(1), None, "pass"),
        (rid(2), None, "fail"),
        (rid(3), None, "fail"),
        (None, "draft.0a1b2c3d.4e5f6a7b", "edit"),
    ]
    assert labels[1]["note"] == NOTE
    assert labels[-1]["expected"] == [good]

    # calibrate reads them: rows 1 and 3 are in the test split, 2 in dev (the hash of their
    # ids); the judge said pass on 1 and 3, people pass and fail; on 2 both said fail.
    code = main(["calibrate", "--results", str(rows_path), "--judge-model", JUDGE, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    test = report["splits"]["test"]
    assert (test["tp"], test["fp"], test["fn"], test["tn"]) == (1, 1, 0, 0)
    assert report["splits"]["dev"] == {"error": "no positive human labels in this split: "
                                       "TPR is undefined"}  # fmt: skip


def test_on_a_phone_the_buttons_label_and_nothing_scrolls_sideways(
    served: tuple[str, Path], browser_context: Any
) -> None:
    """A phone has no j/k/p/f keys: the buttons do the same, and the page fits its width."""
    base, rows_path = served
    page = browser_context.new_page()
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(f"{base}/ui/review", wait_until="load")
    if page.locator("#key").count():  # this context may hold a session from another test
        page.fill("#key", KEY)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/ui")
        page.goto(f"{base}/ui/review")
    page.wait_for_selector("body[data-loaded]")
    page.click("button[data-do=next]")
    page.click("button[data-do=next]")
    assert page.locator("#row-id").inner_text() == rid(1)
    page.click("button[data-do=fail]")
    wait_progress(page, "1 of 7 reviewed")
    for _ in range(3):  # the fail moved the view on, to row 2
        page.click("button[data-do=prev]")
    assert page.locator("#task").text_content() == "draft.0a1b2c3d.4e5f6a7b"
    page.click("button[data-do=edit]")  # opens the editor
    good = {"name": "close_ticket", "arguments": {}}
    page.locator("#editor").fill(json.dumps([good]))
    page.click("button[data-do=edit]")  # saves it
    wait_progress(page, "2 of 7 reviewed")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "review-phone.png"), full_page=True)
    page.close()
    labels = [r for r in read_rows(rows_path) if r["kind"] == "label"]
    assert [(r["labels"], r["draft"], r["verdict"]) for r in labels] == [
        (rid(1), None, "fail"),
        (None, "draft.0a1b2c3d.4e5f6a7b", "edit"),
    ]
    assert labels[1]["expected"] == [good]
