"""The README's quick start runs, as written, against ``gradeproxy demo`` and its answers pass.

The ```python blocks under the README heading that contains "Quick start" are run in order, as
one script, with the official ``openai`` SDK, against a fresh ``gradeproxy demo`` (default
rounds, as a reader would start it; only the port differs, the snippet's ``127.0.0.1:8080``
replaced by the demo's free port). Every request the snippets send is graded: the rows written
after the demo's own batch are one per ``.create(`` call, and each one passes.

A second case runs the same machinery on a quick start of the expected shape (chat and
Responses, streamed and not, for a sample task), so the demo backend's side of the contract is
tested whatever the README says today.

The demo backend is deterministic: after the demo's own batch (two requests per task), its answers
to a task are its 3rd, 4th, ... answers to that task. tickets.duration_format.01,
search.type_changed.01, tickets.list_format.01, calendar.list_format.01,
tickets.field_moved_into_object.01, deploy.new_required_field.01 and deploy.tool_renamed.01
answer the expected call at all of the 3rd to 6th (proxy/demo/answers.py's choose_answer).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.process import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

HEADING = re.compile(r"^(#+)\s+(.*)$")
FENCE = re.compile(r"^```python\s*\n(.*?)^```", re.MULTILINE | re.DOTALL)
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def quick_start_python(markdown: str) -> list[str]:
    """The ```python blocks of the section whose heading contains "Quick start" (up to the next
    heading of the same or a higher level)."""
    lines = markdown.splitlines(keepends=True)
    start = level = None
    for index, line in enumerate(lines):
        match = HEADING.match(line)
        if match is None:
            continue
        if start is None and "quick start" in match.group(2).lower():
            start, level = index + 1, len(match.group(1))
        elif start is not None and level is not None and len(match.group(1)) <= level:
            return FENCE.findall("".join(lines[start:index]))
    return FENCE.findall("".join(lines[start:])) if start is not None else []


def _tools(task_id: str) -> tuple[str, list[dict[str, Any]]]:
    tasks = (REPO / "config" / "tasks" / "sample.jsonl").read_text().splitlines()
    task = next(t for t in map(json.loads, tasks) if t["id"] == task_id)
    return task["prompt"], task["tools"]


def _example() -> str:
    """A quick start of the shape the README's has (one sample task, chat and Responses,
    streamed and not)."""
    task = "tickets.duration_format.01"
    prompt, chat_tools = _tools(task)
    flat = [{"type": "function", **tool["function"]} for tool in chat_tools]
    return f"""# Quick start

```python
from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="demo-key")
headers = {{"X-Grade-Task": "{task}"}}
reply = client.chat.completions.create(
    model="gradeproxy-demo",
    messages=[{{"role": "user", "content": {prompt!r}}}],
    tools={chat_tools!r},
    extra_headers=headers,
)
print(reply.choices[0].message.tool_calls[0].function)
for chunk in client.chat.completions.create(
    model="gradeproxy-demo",
    messages=[{{"role": "user", "content": {prompt!r}}}],
    tools={chat_tools!r},
    extra_headers=headers,
    stream=True,
):
    pass
```

Responses:

```python
response = client.responses.create(
    model="gradeproxy-demo", input={prompt!r}, tools={flat!r}, extra_headers=headers
)
print(response.output[0])
events = client.responses.create(
    model="gradeproxy-demo", input={prompt!r}, tools={flat!r}, extra_headers=headers, stream=True
)
print([event.type for event in events][-1])
```

## Next
"""


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A fresh demo after its own batch: (port, results file)."""
    port, results, log = free_port(), tmp_path / "demo.jsonl", tmp_path / "demo.log"
    command = [sys.executable, "-m", "gradeproxy.cli", "demo", "--port", str(port)]
    with (
        log.open("wb") as out,
        subprocess.Popen(
            [*command, "--results", str(results)], env=ENV, stdout=out, stderr=out, cwd=tmp_path
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 120
            while b"Serving." not in log.read_bytes():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the demo never finished its batch"
                time.sleep(0.2)
            yield port, results
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_the_quick_start_section_is_found() -> None:
    text = "# A\n```python\nno\n```\n## Quick start with x\n```python\na\n```\n```sh\nb\n```\n"
    text += "### Sub\n```python\nc\n```\n## Next\n```python\nd\n```\n"
    assert quick_start_python(text) == ["a\n", "c\n"]


@pytest.mark.parametrize("source", ["README.md", "example"])
def test_the_quick_start_passes_against_the_demo(
    demo: tuple[int, Path], tmp_path: Path, source: str
) -> None:
    port, results = demo
    markdown = (REPO / "README.md").read_text() if source == "README.md" else _example()
    blocks = quick_start_python(markdown)
    assert blocks, "no ```python block under a 'Quick start' heading"
    script = "\n".join(blocks).replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    before = len(results.read_text().splitlines())
    run = subprocess.run(
        [sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    calls = len(re.findall(r"\.create\(", script))
    deadline = time.monotonic() + 30
    while len(results.read_text().splitlines()) < before + calls:
        assert time.monotonic() < deadline, "the quick start's rows never came"
        time.sleep(0.1)
    rows = [json.loads(line) for line in results.read_text().splitlines()[before:]]
    assert len(rows) == calls
    assert [(r["task_id"], r["result"], r["reason"]) for r in rows if r["result"] != "pass"] == []
