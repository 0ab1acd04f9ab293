"""config/answers/sample.jsonl and the package copies (proxy/demo/data) are current, and grading
it offline gives the numbers the live demo shows for the same answers (one grader for both)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from gradeproxy.cli import main
from grader.json import loads_exact
from tests.support.paths import REPO


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_sample_answers", REPO / "scripts" / "make_sample_answers.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_answers_are_current() -> None:
    module = generator()
    assert module.OUT.read_bytes() == module.render(), "run scripts/make_sample_answers.py"


@pytest.mark.parametrize("which", [0, 1], ids=["tasks", "answers"])
def test_package_data_equals_config(which: int) -> None:
    """The wheel's sample suite (proxy/demo/data) is byte for byte the one in config/."""
    source, copy = generator().PACKAGE_COPIES[which]
    assert copy.read_bytes() == source.read_bytes(), "run scripts/make_sample_answers.py"


def test_demo_reads_the_package_copy() -> None:
    """The demo's default suite is the package resource, not a path into a source tree."""
    from proxy.demo.answers import SAMPLE_TASKS_PATH

    assert generator().PACKAGE_COPIES[0][1] == SAMPLE_TASKS_PATH
    assert SAMPLE_TASKS_PATH.is_file()


def test_offline_grade_of_the_sample_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    code = main(
        [
            "grade",
            "--tasks",
            str(REPO / "config" / "tasks" / "sample.jsonl"),
            "--answers",
            str(REPO / "config" / "answers" / "sample.jsonl"),
            "--report",
            str(report),
        ]
    )
    assert code == 0
    data = loads_exact(report.read_text())
    assert (data["n"], data["passed"], data["staleSchemaUsed"]) == (144, 80, 39)
    assert set(data["reasons"]) == {"match", "stale_schema", "value_mismatch", "no_call"}
    assert len(data["perMutationKind"]) == 9
    assert "TOTAL" in capsys.readouterr().out
