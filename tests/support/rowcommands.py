"""Every command that reads result rows, run over the same sources, its answers collected.

``compare`` (table and ``--json``), ``compare --gate`` over live rows and over a baseline and a
candidate, ``regrade`` (its counts and its diff file) and ``export`` (the Parquet rows): what a
test compares between two ways of giving the same rows (a v1 file and a v2 file, the merged
files and the rows database).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gradeproxy.cli import main
from grader.json import loads_exact

GATE = """\
drift_budget:
  noise_tolerance_pts: 1
  hard_fail_threshold_pts: 5
suites:
  - name: all
    task_ids: [weather.single, weather.city_only, time.tokyo]
"""


def answers(
    sources: list[str],
    tmp: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    baseline: list[str] | None = None,
) -> dict[str, Any]:
    """Each command's exit code and output over ``sources`` (files or database URLs)."""
    gate = tmp / "gate.yaml"
    gate.write_text(GATE)
    got: dict[str, Any] = {}

    def run(name: str, argv: list[str]) -> str:
        capsys.readouterr()
        code = main(argv)
        out = capsys.readouterr()
        got[name] = {"code": code, "out": out.out}
        assert code in (0, 1, 3), (name, out.err)
        return out.out

    run("compare", ["compare", "--results", *sources])
    compared = loads_exact(run("compare_json", ["compare", "--json", "--results", *sources]))
    got["compare_json"] = {k: v for k, v in compared.items() if k != "files"}  # names differ
    run("gate_live", ["compare", "--gate", str(gate), "--json", "--results", *sources])
    base = baseline or sources
    run(
        "gate_runs",
        ["compare", "--gate", str(gate), "--json", "--baseline", *base, "--candidate", *sources],
    )
    diff = tmp / "diff.jsonl"
    run("regrade", ["regrade", "--json", "--results", *sources, "--tasks", str(tasks_file),
                    "--out", str(diff)])  # fmt: skip
    got["regrade_diff"] = [loads_exact(line) for line in diff.read_text().splitlines()]
    parquet = tmp / "rows.parquet"
    capsys.readouterr()
    assert main(["export", "--results", *sources, "--parquet", str(parquet)]) == 0, (
        capsys.readouterr().err
    )
    table = pq.read_table(parquet)
    got["export_columns"] = table.schema.names
    got["export_rows"] = table.to_pylist()
    return got
