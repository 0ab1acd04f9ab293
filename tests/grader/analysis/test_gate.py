"""``gradeproxy compare --gate``: per frozen suite a delta with its 95% half-width, a warn band, a
hard fail (exit 1), "cannot decide" (exit 3), paired where both runs hold the item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gradeproxy.cli import main
from grader.analysis.gate import Item, evaluate, ids_digest, parse_gate
from grader.json import loads_exact
from tests.support.files import write_jsonl

GATE = {
    "drift_budget": {"noise_tolerance_pts": 1, "hard_fail_threshold_pts": 5},
    "suites": [{"name": "core", "task_ids": ["a1", "a2"]}],
}


def run_rows(n: int, fails: set[int], paired: bool = True) -> list[dict[str, Any]]:
    """``n`` graded rows over tasks a1/a2; the items in ``fails`` failed."""
    rows = []
    for i in range(n):
        row = {"task_id": f"a{1 + i % 2}", "result": "fail" if i in fails else "pass"}
        rows.append({**row, "sample_id": f"s{i}"} if paired else row)
    return rows


def gate(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


CASES = [
    # (baseline rows, candidate rows, decision, exit code)
    pytest.param(run_rows(400, set()), run_rows(400, set()), "pass", 0, id="no_change_pass"),
    pytest.param(run_rows(400, set()), run_rows(400, set(range(40))), "hard_fail", 1,
                 id="ten_point_drop_hard_fail"),
    pytest.param(run_rows(400, set()), run_rows(400, set(range(12))), "warn", 0,
                 id="three_point_drop_warn_band"),
    pytest.param(run_rows(20, {0, 1}), run_rows(20, {2, 3}), "cannot_decide", 3,
                 id="twenty_items_cannot_resolve_five_points"),
    pytest.param(run_rows(200, set(range(20)), False), run_rows(200, set(range(20)), False),
                 "cannot_decide", 3, id="unpaired_200_each_too_wide"),
    pytest.param(run_rows(2000, set(range(200)), False), run_rows(2000, set(range(200)), False),
                 "pass", 0, id="unpaired_2000_each_decides"),
]  # fmt: skip


@pytest.mark.parametrize(("base", "cand", "decision", "code"), CASES)
def test_offline_runs_gate_per_suite(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    base: list[dict[str, Any]],
    cand: list[dict[str, Any]],
    decision: str,
    code: int,
) -> None:
    a, b = write_jsonl(tmp_path / "a.jsonl", base), write_jsonl(tmp_path / "b.jsonl", cand)
    args = ["compare", "--gate", str(gate(tmp_path, GATE)), "--baseline", str(a)]
    assert main([*args, "--candidate", str(b), "--json"]) == code
    [suite] = loads_exact(capsys.readouterr().out)["suites"]
    assert suite["decision"] == decision
    assert suite["paired"] is ("sample_id" in base[0])
    lo, hi = suite["delta_interval_95_pts"]
    assert lo < suite["delta_pts"] < hi
    if decision == "cannot_decide":
        assert suite["half_width_95_pts"] >= 2.5
    if decision == "hard_fail":
        assert suite["interval_past_threshold"] is True
    assert main([*args, "--candidate", str(b)]) == code
    text = capsys.readouterr().out
    assert {"hard_fail": "HARD FAIL", "cannot_decide": "CANNOT DECIDE"}.get(decision, "") in text


def test_live_shadow_rows_pair_by_pair_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = []
    for i in range(300):
        task = f"a{1 + i % 2}"
        rows.append({"task_id": task, "result": "pass", "variant": "primary", "pair_id": f"p{i}"})
        result = "fail" if i < 30 else "pass"
        rows.append({"task_id": task, "result": result, "variant": "shadow", "pair_id": f"p{i}"})
    rows.append({"task_id": "a1", "result": "error", "variant": "shadow", "pair_id": "p0"})
    results = write_jsonl(tmp_path / "grades.jsonl", rows)
    args = ["compare", "--results", str(results), "--gate", str(gate(tmp_path, GATE)), "--json"]
    assert main(args) == 1
    [suite] = loads_exact(capsys.readouterr().out)["suites"]
    assert (suite["paired"], suite["n"], suite["delta_pts"]) == (True, 300, -10.0)


def test_pairs_only_items_both_runs_hold_and_count_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = run_rows(400, set())
    cand = run_rows(400, set(range(12)))[:300]
    a, b = write_jsonl(tmp_path / "a.jsonl", base), write_jsonl(tmp_path / "b.jsonl", cand)
    args = ["compare", "--gate", str(gate(tmp_path, GATE)), "--baseline", str(a)]
    main([*args, "--candidate", str(b), "--json"])
    [suite] = loads_exact(capsys.readouterr().out)["suites"]
    assert (suite["n"], suite["left_out_unpaired"], suite["delta_pts"]) == (300, 100, -4.0)


@pytest.mark.parametrize(
    ("suite", "message"),
    [
        pytest.param({"name": "core", "task_ids": ["a1", "a2", "a3"]},
                     "no graded row of 1 frozen task", id="frozen_list_differs"),
        pytest.param({"name": "core", "match": "a*", "digest": "sha256:0"},
                     f"digest {ids_digest(['a1', 'a2'])}, not the frozen",
                     id="glob_digest_differs"),
        pytest.param({"name": "core", "match": "a*"},
                     f'is not frozen: its match [\'a*\'] resolves to 2 id(s) in the baseline '
                     f'rows; add  digest: "{ids_digest(["a1", "a2"])}"', id="glob_unfrozen"),
        pytest.param({"name": "core", "task_ids": ["a1"], "hard_fail_threshold_pts": 0.5},
                     "must exceed noise_tolerance_pts", id="threshold_inside_noise"),
    ],
)  # fmt: skip
def test_unfrozen_or_differing_suites_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: dict[str, Any], message: str
) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", run_rows(10, set()))
    path = gate(tmp_path, {**GATE, "suites": [suite]})
    assert main(["compare", "--gate", str(path), "--baseline", str(a), "--candidate", str(a)]) == 2
    assert message in capsys.readouterr().err


def test_a_glob_suite_with_its_digest_gates(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", run_rows(400, set()))
    suite = {"name": "core", "match": ["a*"], "digest": ids_digest(["a1", "a2"])}
    path = gate(tmp_path, {**GATE, "suites": [suite]})
    assert main(["compare", "--gate", str(path), "--baseline", str(a), "--candidate", str(a)]) == 0


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=300))
def test_the_paired_delta_is_the_rate_difference_and_never_claims_zero_width(
    pairs: list[tuple[bool, bool]],
) -> None:
    [suite] = parse_gate(GATE)
    base = [Item("a1", ("s", i), b) for i, (b, _) in enumerate(pairs)]
    cand = [Item("a1", ("s", i), c) for i, (_, c) in enumerate(pairs)]
    result = evaluate(suite, base, cand)
    expected = 100 * (sum(c for _, c in pairs) - sum(b for b, _ in pairs)) / len(pairs)
    assert result.delta_pts == expected
    assert result.half_width_pts is not None
    assert result.half_width_pts > 0
    assert (result.decision == "hard_fail") is (-expected > suite.hard_fail_pts)
    if result.decision != "hard_fail" and result.half_width_pts >= suite.hard_fail_pts / 2:
        assert result.decision == "cannot_decide"
