"""What the demo backend answers: its tasks, and a deterministic plan of answers for each.

Every answer is a pure function of the task and a per-task request number, hashed with SHA-256
(never Python's per-process ``hash``), so tests and the demo driver can predict exactly what was
sent: mostly the expected call, often the stale one, sometimes a wrong call or prose.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import orjson

from grader.tasks import task_files

AnswerKind: TypeAlias = Literal["expected", "stale", "wrong", "prose", "fenced"]

# The sample suite ships inside the package (a wheel has no config/ folder): a copy of
# config/tasks/sample.jsonl, written by scripts/make_sample_answers.py and checked equal by
# tests/proxy/demo/test_sample_answers.py. A wheel installs packages as plain files, so the
# resource is a Path.
SAMPLE_TASKS_PATH: Final = Path(str(files("proxy.demo").joinpath("data", "tasks.jsonl")))
SAMPLE_ANSWERS_PATH: Final = Path(str(files("proxy.demo").joinpath("data", "answers.jsonl")))
DEMO_MODELS: Final = ("gradeproxy-demo", "gradeproxy-demo-mini")
MAX_CHOICES: Final = 128

# Cumulative percentage thresholds. "prose" and "fenced" share the 10% that answers in text, so
# the grader sees both a plain failure and a call it has to dig out of a Markdown fence.
_MIX: Final[tuple[tuple[int, AnswerKind], ...]] = (
    (55, "expected"),
    (80, "stale"),
    (90, "wrong"),
    (95, "prose"),
    (100, "fenced"),
)
# A fixed date keeps /v1/models byte-identical across runs.
_PROSE: Final = (
    "I'm sorry, but I can't help with that request.",
    "I can't make changes in that system from here. Could you do it from the dashboard instead?",
    "Before I call {tool}, can you confirm that you want me to go ahead?",
    "Done! I've taken care of that for you.",
)


@dataclass(frozen=True, slots=True)
class DemoTask:
    """The slice of a task the backend needs; the grader's own task type stays independent."""

    id: str
    prompt: str
    expected: Mapping[str, Any]
    stale: Mapping[str, Any]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "task") -> DemoTask:
        task_id = raw.get("id")
        prompt = raw.get("prompt")
        metadata = raw.get("metadata")
        if not isinstance(task_id, str) or not task_id:
            raise ValueError(f"{where}: 'id' must be a non-empty string")
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where} ({task_id}): 'prompt' must be a non-empty string")
        if not isinstance(metadata, Mapping):
            raise ValueError(f"{where} ({task_id}): 'metadata' must be an object")
        expected = _checked_call(raw.get("expected"), f"{where} ({task_id}) expected")
        stale = _checked_call(metadata.get("stale"), f"{where} ({task_id}) metadata.stale")
        return cls(id=task_id, prompt=prompt, expected=expected, stale=stale)


TaskRef: TypeAlias = DemoTask | Mapping[str, Any]


def _checked_call(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: must be an object")
    name = value.get("name")
    arguments = value.get("arguments")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    if not isinstance(arguments, Mapping):
        raise ValueError(f"{where}: 'arguments' must be an object")
    call = {"name": name, "arguments": dict(arguments)}
    try:
        # Checked up front so an unservable task fails at start-up, not mid-demo.
        orjson.dumps(call)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"{where}: cannot be served as JSON ({exc})") from exc
    return call


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_demo_tasks(path: Path) -> tuple[DemoTask, ...]:
    """Load a JSONL task file (or a folder of them, as the proxy does), refusing ambiguity: a
    prompt or id that names two tasks would make recognition, and therefore every prediction,
    depend on file order."""
    tasks: list[DemoTask] = []
    ids: set[str] = set()
    prompts: set[str] = set()
    files = task_files(path)
    lines = [(f, n, line) for f in files for n, line in enumerate(f.read_bytes().splitlines(), 1)]
    for file, lineno, line in lines:
        if not line.strip():
            continue
        where = f"{file}:{lineno}"
        try:
            # The stdlib parser, because orjson turns integers beyond 64 bits into floats and
            # would silently change an expected value.
            raw = json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: a task must be a JSON object")
        task = DemoTask.from_mapping(raw, where)
        if task.id in ids:
            raise ValueError(f"{where}: duplicate task id {task.id!r}")
        if task.prompt in prompts:
            raise ValueError(f"{where}: prompt of {task.id!r} repeats an earlier task's prompt")
        ids.add(task.id)
        prompts.add(task.prompt)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tuple(tasks)


def _as_task(task: TaskRef) -> DemoTask:
    return task if isinstance(task, DemoTask) else DemoTask.from_mapping(task)


def _task_id(task: TaskRef | str) -> str:
    if isinstance(task, str):
        return task
    if isinstance(task, DemoTask):
        return task.id
    task_id = task.get("id")
    if not isinstance(task_id, str):
        raise ValueError("task has no string 'id'")
    return task_id


def _roll(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _hex(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def choose_answer(task: TaskRef | str, counter: int) -> AnswerKind:
    """What the backend sends for the ``counter``-th answer to ``task`` (0-based, per process).

    Public so the demo driver and the tests can predict a scoreboard instead of trusting it.
    """
    if counter < 0:
        raise ValueError("counter must be >= 0")
    roll = _roll("mix", _task_id(task), str(counter)) % 100
    return next(kind for limit, kind in _MIX if roll < limit)


def _leaf_paths(value: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(value, dict) and value:
        return [p for key in sorted(value) for p in _leaf_paths(value[key], (*prefix, key))]
    if isinstance(value, list) and value:
        return [p for i, item in enumerate(value) for p in _leaf_paths(item, (*prefix, i))]
    return [prefix]


def _perturb_string(text: str) -> str:
    # Bumping the last digit mimics an off-by-one id, date or duration; flipping case mimics a
    # sloppy copy. Either way the result differs after the grader's comma and duration rules.
    for i in range(len(text) - 1, -1, -1):
        if "0" <= text[i] <= "9":
            return f"{text[:i]}{(int(text[i]) + 1) % 10}{text[i + 1 :]}"
    for i, char in enumerate(text):
        if char.swapcase() != char:
            return text[:i] + char.swapcase() + text[i + 1 :]
    return text + "x"


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return _perturb_string(value)
    if value is None:
        return 0
    if isinstance(value, list):
        return [None]
    return {"unexpected": True}


def wrong_call(task: TaskRef) -> dict[str, Any]:
    """The expected call with one argument value changed: right tool, right shape, wrong value.

    The changed leaf is fixed per task, like a model that keeps making the same mistake.
    """
    demo = _as_task(task)
    arguments = orjson.loads(orjson.dumps(demo.expected["arguments"]))
    leaves = _leaf_paths(arguments)
    path = leaves[_roll("wrong", demo.id) % len(leaves)]
    if not path:
        return {"name": demo.expected["name"], "arguments": {"unexpected": True}}
    parent: Any = arguments
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _perturb(parent[path[-1]])
    return {"name": demo.expected["name"], "arguments": arguments}


def _call_id(task_id: str, counter: int) -> str:
    return "call_" + _hex("call", task_id, str(counter))[:24]


def planned_message(task: TaskRef, counter: int) -> dict[str, Any]:
    """The exact assistant message sent as the ``counter``-th answer to ``task``."""
    demo = _as_task(task)
    kind = choose_answer(demo, counter)
    if kind in ("expected", "stale", "wrong"):
        if kind == "expected":
            call: Mapping[str, Any] = demo.expected
        elif kind == "stale":
            call = demo.stale
        else:
            call = wrong_call(demo)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": _call_id(demo.id, counter),
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": orjson.dumps(call["arguments"]).decode(),
                    },
                }
            ],
            "refusal": None,
            "annotations": [],
        }
    if kind == "fenced":
        fenced = orjson.dumps(
            {"name": demo.expected["name"], "arguments": demo.expected["arguments"]},
            option=orjson.OPT_INDENT_2,
        ).decode()
        content = (
            "I can't run tools in this conversation, but this is the call to make:\n\n"
            f"```json\n{fenced}\n```\n\nLet me know if anything should change."
        )
    else:
        template = _PROSE[_roll("prose", demo.id, str(counter)) % len(_PROSE)]
        content = template.format(tool=demo.expected["name"])
    return _text_message(content)


def _text_message(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "refusal": None, "annotations": []}
