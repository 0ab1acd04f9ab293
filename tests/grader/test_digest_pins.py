"""The digests of a fixed task file, pinned to their values.

A task set's digest, each task's ``checks_digest`` and each check's digest are compared across
runs and versions (rows carry them; the task cache and the engine key on them), so a faster
way of writing them must give the same bytes. The file holds what takes each way of writing:
clean tasks orjson writes whole, integral doubles (``5.0``, ``-0.0``), doubles whose spelling
differs (``1e-05``, ``1e+16``), ``.0,`` inside strings, escapes, an integer past 64 bits, a
check with options and a task with a stale call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.loader import load_tasks

TASK_FILE = "\n".join(
    [
        '{"id": "clean", "expected": {"name": "f", "arguments": {"city": "Paris", "n": 3}}}',
        '{"id": "integral", "expected": {"name": "g", "arguments": {"x": 5.0, "y": -0.0, '
        '"z": [1.0, 2.5]}}, "metadata": {"question": "about \\"5.0\\", 1.0,2"}}',
        '{"id": "spelling", "expected": {"name": "h", "arguments": {"a": 0.00001, "b": 1e16, '
        '"c": 1e-7, "d": 12345678901234567890123}}}',
        '{"id": "strings", "expected": {"name": "k", "arguments": {"s": "a.0,b", '
        '"t": "caf\\u00e9 \\\\ \\u0001", "u": "x.0]"}}, "metadata": {"tools": '
        '[{"default": 0.0, "enum": ["1.0", 2.0]}]}}',
        '{"id": "options", "expected": {"name": "m", "arguments": {"q": 1, "r": "A b"}}, '
        '"checks": [{"type": "tool_call", "name": "call", "strings": {"default": "bfcl"}, '
        '"optional": ["arguments.r"], "numbers": {"arguments.q": "integer"}, '
        '"acceptable": {"arguments.q": [1, 1.0, 2]}}]}',
        '{"id": "stale", "expected": {"name": "n", "arguments": {"v": 2.0}}, '
        '"metadata": {"stale": {"name": "n", "arguments": {"v": 1.0}}, '
        '"mutationKind": "value_changed"}}',
    ]
)

TASKS_DIGEST = "sha256:a643b59b4c0b4547e427ddf3b44d394b22bf90feb233208520cb269267c48112"
CHECKS_DIGESTS: dict[str, str] = {
    "clean": "sha256:4c013c13fd3ecd8a36deb8331955439fe0e23d9dcb62e05fc51f7ca47231753e",
    "integral": "sha256:0e237299d2dc482bd8d9732456bd1cda638940412b4a4553d6cee762fc84a262",
    "spelling": "sha256:8e8856c1d19bdb866351e125b1c402920d708ae866bf12c836752533f3dd5f67",
    "strings": "sha256:288f2aa66ce4044634574daa855e4add6b8e63d6b37d9a3e610ad9c1ebf137ef",
    "options": "sha256:314becbb524ea2bbdd0adc9463979a0747518232997bdf5c19cdae578cf3182f",
    "stale": "sha256:5d4b1068f2500ab94c2b25d703e51aa0feac4ccbc9ea5f2b66161c4570b13959",
}
CHECK_DIGESTS: dict[str, str] = {
    "clean": "sha256:d71dd73daff97cbdb6b31ad0152a643e151710d6619c865e055bca13f42ac410",
    "integral": "sha256:d71dd73daff97cbdb6b31ad0152a643e151710d6619c865e055bca13f42ac410",
    "spelling": "sha256:d71dd73daff97cbdb6b31ad0152a643e151710d6619c865e055bca13f42ac410",
    "strings": "sha256:d71dd73daff97cbdb6b31ad0152a643e151710d6619c865e055bca13f42ac410",
    "options": "sha256:c1762a4d4bd305dab908307f061b646212fe1c2f410032c8509b7fd88acb0a2b",
    "stale": "sha256:d71dd73daff97cbdb6b31ad0152a643e151710d6619c865e055bca13f42ac410",
}


@pytest.fixture(scope="module")
def task_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pins") / "tasks.jsonl"
    path.write_text(TASK_FILE + "\n", encoding="utf-8")
    return path


def test_the_task_sets_digest_is_pinned(task_file: Path) -> None:
    assert load_tasks(task_file).digest == TASKS_DIGEST


@pytest.mark.parametrize("task_id", sorted(CHECKS_DIGESTS))
def test_a_tasks_checks_digest_is_pinned(task_file: Path, task_id: str) -> None:
    task = load_tasks(task_file).get(task_id)
    assert task is not None
    assert task.checks_digest == CHECKS_DIGESTS[task_id]


@pytest.mark.parametrize("task_id", sorted(CHECK_DIGESTS))
def test_a_checks_digest_is_pinned(task_file: Path, task_id: str) -> None:
    task = load_tasks(task_file).get(task_id)
    assert task is not None
    assert [d.digest for d in task.checks] == [CHECK_DIGESTS[task_id]]
