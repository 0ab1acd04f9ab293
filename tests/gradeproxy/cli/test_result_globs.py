"""Commands that read result rows expand quoted globs themselves: ``--workers N`` writes one file
per worker (``grades.w0.jsonl`` …), read back as ``'results/grades.w*.jsonl'``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gradeproxy.cli import _build_parser, main
from gradeproxy.cli._io import InputError, expand_globs
from grader.json import dumps

FILES = (
    "grades.w0.jsonl",
    "grades.w1.jsonl",
    "grades.w10.jsonl",
    "grades.w0.jsonl.1",
    "odd[1].jsonl",
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in FILES:
        (tmp_path / name).write_text("")
    return tmp_path


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            ["grades.w*.jsonl"],
            ["grades.w0.jsonl", "grades.w1.jsonl", "grades.w10.jsonl"],
            id="every_worker_sorted",
        ),
        pytest.param(
            ["grades.w*.jsonl*"],
            ["grades.w0.jsonl", "grades.w0.jsonl.1", "grades.w1.jsonl", "grades.w10.jsonl"],
            id="with_rotations",
        ),
        pytest.param(
            ["grades.w1.jsonl", "grades.w?.jsonl"],
            ["grades.w1.jsonl", "grades.w0.jsonl"],
            id="each_file_once_in_first_seen_order",
        ),
        pytest.param(["odd[1].jsonl"], ["odd[1].jsonl"], id="an_existing_name_is_never_a_pattern"),
        pytest.param(["missing.jsonl"], ["missing.jsonl"], id="a_plain_missing_name_is_kept"),
    ],
)
def test_expand_globs(folder: Path, given: list[str], expected: list[str]) -> None:
    paths = expand_globs(folder / name for name in given)
    assert paths == [folder / name for name in expected]


def test_a_glob_that_matches_nothing_is_an_error(folder: Path) -> None:
    with pytest.raises(InputError, match=re.escape("grades.x.*: no file matches")):
        expand_globs([folder / "grades.x.*"])


@pytest.mark.parametrize(
    ("argv", "dest"),
    [
        pytest.param(["compare", "--results"], "results", id="compare"),
        pytest.param(["compare", "--gate", "g.yaml", "--baseline"], "baseline", id="gate_baseline"),
        pytest.param(
            ["compare", "--gate", "g.yaml", "--candidate"], "candidate", id="gate_candidate"
        ),
        pytest.param(["export", "--parquet", "o.parquet", "--results"], "results", id="export"),
        pytest.param(
            ["regrade", "--tasks", "t.jsonl", "--out", "d.jsonl", "--results"],
            "results",
            id="regrade",
        ),
    ],
)
def test_every_result_reading_command_expands_globs(
    folder: Path, argv: list[str], dest: str
) -> None:
    args = _build_parser().parse_args([*argv, str(folder / "grades.w*.jsonl")])
    assert getattr(args, dest) == [folder / f"grades.w{i}.jsonl" for i in (0, 1, 10)]


def row(pair: str, variant: str, result: str) -> bytes:
    fields = {"pair_id": pair, "variant": variant, "result": result, "task_id": "A", "choice": 0}
    return dumps(fields) + b"\n"


def test_compare_over_a_glob_reads_what_the_files_listed_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One pair's legs landed on different workers: only reading both files pairs them.
    (tmp_path / "grades.w0.jsonl").write_bytes(
        row("p1", "primary", "pass") + row("p2", "shadow", "pass")
    )
    (tmp_path / "grades.w1.jsonl").write_bytes(
        row("p1", "shadow", "fail") + row("p2", "primary", "fail")
    )
    listed = [str(tmp_path / "grades.w0.jsonl"), str(tmp_path / "grades.w1.jsonl")]
    assert main(["compare", "--json", "--results", *listed]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["compare", "--json", "--results", str(tmp_path / "grades.w*.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    assert expected["overall"]["pairs"] == 2


def test_a_glob_that_matches_nothing_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compare", "--results", str(tmp_path / "grades.w*.jsonl")])
    assert exited.value.code == 2
    assert "argument --results: " in capsys.readouterr().err
