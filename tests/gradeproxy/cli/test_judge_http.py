"""The one judge client (proxy/judge_client.py, the proxy's and the offline commands') against a
real local HTTP server speaking chat completions."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.checks import CheckContext, Judge, JudgeConfig, Sample, build_check
from grader.json import dumps, loads_exact
from proxy.judge_client import MAX_REPLY_BYTES, AiohttpJudgeClient, JudgeHTTPError
from tests.support.backend import serve_in_thread
from tests.support.paths import REPO

GOOD = ("refunded", "replacement", "Open Settings")


def verdict(messages: list[dict[str, str]]) -> str:
    """A scripted judge: good answers contain one of GOOD; the reply fits each contract."""
    first, last = messages[0]["content"], messages[-1]["content"]
    if first.startswith("You are grading"):
        answer = first.split("\nResponse: ", 1)[1].rsplit("\nVerdict:", 1)[0]
        return "PASS" if any(g in answer for g in GOOD) else "FAIL"
    good = any(g in last.split("Reply: ", 1)[-1] for g in GOOD)
    if "labels" in first:
        return "empathetic" if good else "hostile"
    return "9" if good else "2"


class Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []  # noqa: RUF012 - test-local record of requests

    def do_POST(self) -> None:
        body = loads_exact(self.rfile.read(int(self.headers["Content-Length"])).decode())
        Handler.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if body["model"].startswith("broken"):
            self.send_response(500)
            self.end_headers()
            return
        content: Any = verdict(body["messages"])
        if body["model"].startswith("huge"):
            content = "PASS" + " " * MAX_REPLY_BYTES
        payload = (
            b"not json"
            if body["model"].startswith("garbled")
            else dumps({"choices": [{"message": {"content": content}}]})
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = serve_in_thread(server)
    Handler.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


CRITERION = {
    "type": "label_model",
    "name": "c",
    "criterion": "Resolves the issue.",
    "pass_examples": ["We refunded you."],
    "fail_examples": ["No."],
    "task": "Help.",
}


@pytest.mark.parametrize(
    ("model", "answer", "passed", "code"),
    [
        pytest.param(
            "claude-3-5-haiku-20241022", "We refunded it today.", True, "judge_pass", id="pass"
        ),
        pytest.param("claude-3-5-haiku-20241022", "No.", False, "judge_fail", id="fail"),
        pytest.param("broken-2024-01-01", "x", None, "judge_error", id="http_500"),
        pytest.param("garbled-2024-01-01", "x", None, "judge_error", id="not_a_completion"),
        pytest.param("huge-2024-01-01", "x", None, "judge_error", id="reply_over_1_mib"),
    ],
)
async def test_client_round_trip(
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    answer: str,
    passed: bool | None,
    code: str,
) -> None:
    monkeypatch.setenv("GP_JUDGE_KEY", "test-key")
    config = JudgeConfig(endpoint=endpoint, model=model, api_key_env="GP_JUDGE_KEY", retries=1)
    judge = Judge(AiohttpJudgeClient.from_config(config), config)
    result = await build_check(CRITERION).arun(
        Sample.from_answer(answer), {}, CheckContext(), judge
    )
    assert (result.passed, result.reason_code) == (passed, code)
    assert Handler.seen[0]["path"] == "/v1/chat/completions"
    assert Handler.seen[0]["auth"] == "Bearer test-key"
    assert Handler.seen[0]["temperature"] == 0
    assert "test-key" not in (result.error or "")


async def test_missing_secret_is_an_error_naming_the_variable(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GP_JUDGE_KEY", raising=False)
    client = AiohttpJudgeClient(endpoint, "GP_JUDGE_KEY")
    with pytest.raises(JudgeHTTPError, match="GP_JUDGE_KEY is not set"):
        await client.complete("m-2024-01-01", [{"role": "user", "content": "x"}], 0.0)
    assert Handler.seen == []


def test_endpoint_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        AiohttpJudgeClient("file:///etc/passwd")


def test_validate_tasks_runs_judge_checks_with_judge_config(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "judge.yaml"
    config.write_text(f"judge:\n  endpoint: {endpoint}\n  retries: 0\n")
    code = main(["validate-tasks", str(REPO / "config" / "tasks-judge"), "--judge", str(config)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SKIPPED" not in out
    assert out.count("\nOK ") + out.startswith("OK ") == 3
    assert Handler.seen
    assert all(r["temperature"] == 0 for r in Handler.seen)
