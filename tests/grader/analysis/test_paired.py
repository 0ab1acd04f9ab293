"""`gradeproxy compare` and its statistics, against hand-computed values: exact McNemar
p-values, wins/losses/ties over complete pairs only, rates per task and mutation kind, file:line
errors, and the proxy's own result files as input."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.analysis.paired import mcnemar_exact
from tests.support.plan_backend import PlanBackend, plan_request
from tests.support.proxy import ProxyFactory, settle


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        pytest.param(1, 9, Fraction(11, 512), id="b1_c9_is_0.021484375"),
        pytest.param(9, 1, Fraction(11, 512), id="symmetric"),
        pytest.param(0, 0, Fraction(1), id="no_discordant_pairs_p_is_1"),
        pytest.param(0, 10, Fraction(2, 1024), id="all_one_way_10"),
        pytest.param(5, 5, Fraction(1), id="balanced_capped_at_1"),
        pytest.param(0, 1, Fraction(1), id="single_discordant_pair"),
        pytest.param(2, 8, Fraction(2 * (1 + 10 + 45), 1024), id="b2_c8_is_0.109375"),
        pytest.param(0, 60, Fraction(2, 2**60), id="tiny_p_stays_exact"),
    ],
)
def test_mcnemar_exact(b: int, c: int, p: Fraction) -> None:
    assert mcnemar_exact(b, c) == p


def test_mcnemar_b1_c9_as_a_float() -> None:
    assert float(mcnemar_exact(1, 9)) == 0.021484375


def row(pair: str | None, variant: str | None, result: str, task: str = "A", **extra: Any) -> Any:
    kinds = {"A": "field_renamed", "B": "enum_value_changed"}
    return {"pair_id": pair, "variant": variant, "result": result, "task_id": task,
            "mutationKind": kinds.get(task), "choice": 0, **extra}  # fmt: skip


# (pair id, task, primary result, shadow result): the hand-computed example.
PAIRS = [
    ("p1", "A", "pass", "pass"),  # tie
    ("p2", "A", "pass", "fail"),  # loss
    ("p3", "A", "fail", "pass"),  # win
    ("p4", "A", "stale", "pass"),  # win
    ("p5", "A", "fail", "stale"),  # tie (neither passed)
    ("p6", "B", "pass", "stale"),  # loss
    ("p7", "B", "pass", "pass"),  # tie
]
LEFT_OUT = [
    row("p8", "primary", "pass"),  # incomplete: no shadow
    row("p9", "shadow", "fail"),  # incomplete: no primary
    row("p10", "primary", "pass"),  # conflicting: primary twice
    row("p10", "primary", "fail"),
    row("p10", "shadow", "fail"),
    row(None, "primary", "pass"),  # unpaired rows: no pair id, no variant
    {"task_id": "A", "result": "pass", "score": 1},  # a `gradeproxy grade` row
]


def example_rows() -> list[Any]:
    rows: list[Any] = []
    for pair, task, primary, shadow in PAIRS:
        rows += [row(pair, "shadow", shadow, task), row(pair, "primary", primary, task)]
    return rows + LEFT_OUT


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def compare_json(capsys: pytest.CaptureFixture[str], *paths: Path) -> Any:
    assert main(["compare", "--json", "--results", *map(str, paths)]) == 0
    return json.loads(capsys.readouterr().out)


def side(passes: int, stales: int, pairs: int) -> dict[str, Any]:
    return {"pass": passes, "pass_rate": passes / pairs, "stale": stales,
            "stale_rate": stales / pairs}  # fmt: skip


@pytest.mark.parametrize(
    ("section", "group", "pairs", "primary", "shadow", "wlt", "p"),
    [
        pytest.param("by_task", "A", 5, (2, 1), (3, 1), (2, 1, 2), "1/1", id="task_A"),
        pytest.param("by_task", "B", 2, (2, 0), (1, 1), (0, 1, 1), "1/1", id="task_B"),
        pytest.param("by_mutation_kind", "field_renamed", 5, (2, 1), (3, 1), (2, 1, 2), "1/1",
                     id="kind_field_renamed"),
        pytest.param("by_mutation_kind", "enum_value_changed", 2, (2, 0), (1, 1), (0, 1, 1),
                     "1/1", id="kind_enum_value_changed"),
        pytest.param("overall", None, 7, (4, 1), (4, 2), (2, 2, 3), "1/1", id="overall"),
    ],
)  # fmt: skip
def test_hand_computed_example(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    section: str,
    group: str | None,
    pairs: int,
    primary: tuple[int, int],
    shadow: tuple[int, int],
    wlt: tuple[int, int, int],
    p: str,
) -> None:
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", example_rows()))
    got = out[section] if group is None else out[section][group]
    assert got["pairs"] == pairs
    assert got["primary"] == side(*primary, pairs)
    assert got["shadow"] == side(*shadow, pairs)
    assert (got["wins"], got["losses"], got["ties"]) == wlt
    assert got["mcnemar"]["p_value_exact"] == p
    assert (got["mcnemar"]["b"], got["mcnemar"]["c"]) == (wlt[1], wlt[0])


def test_left_out_rows_and_pairs_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", example_rows()))
    assert (out["rows"], out["pairs"]) == (2 * len(PAIRS) + len(LEFT_OUT), len(PAIRS))
    assert (out["incomplete_pairs"], out["conflicting_pairs"], out["unpaired_rows"]) == (2, 1, 2)


def test_legs_split_across_files_still_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A result file rotated between the two legs: pairs are found across files."""
    rows = example_rows()
    first = write_jsonl(tmp_path / "grades.jsonl.1", rows[::2])
    second = write_jsonl(tmp_path / "grades.jsonl", rows[1::2])
    out = compare_json(capsys, first, second)
    assert out["pairs"] == len(PAIRS)
    assert out["files"] == [str(first), str(second)]


def test_choices_pair_separately(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [row("p1", v, r, choice=c) for (v, c), r in zip(
        itertools.product(("primary", "shadow"), (0, 1)), ("pass", "fail", "fail", "pass"),
        strict=True)]  # fmt: skip
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", rows))
    assert (out["pairs"], out["overall"]["wins"], out["overall"]["losses"]) == (2, 1, 1)


def test_significant_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1 loss and 9 wins among 30 pairs: p = 11/512."""
    plan = [("fail", "pass")] * 9 + [("pass", "fail")] + [("pass", "pass")] * 20
    rows = [
        r
        for n, (p, s) in enumerate(plan)
        for r in (row(f"q{n}", "primary", p), row(f"q{n}", "shadow", s))
    ]
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", rows))
    assert out["overall"]["mcnemar"] == {"b": 1, "c": 9, "p_value": 0.021484375,
                                         "p_value_exact": "11/512"}  # fmt: skip
    assert (out["overall"]["wins"], out["overall"]["losses"], out["overall"]["ties"]) == (9, 1, 20)


def test_no_pairs_at_all_is_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", LEFT_OUT[:2]))
    assert out["pairs"] == 0
    assert out["overall"]["primary"]["pass_rate"] is None
    assert out["overall"]["mcnemar"]["p_value"] == 1.0


@pytest.mark.parametrize(
    ("rows", "hint"),
    [
        pytest.param(
            [{"task_id": "A", "result": "pass"}, {"task_id": "B", "result": "fail"}],
            "from a proxy without a shadow. Configure upstream.shadow",
            id="no_shadow_rows",
        ),
        pytest.param(
            [row("q1", "primary", "pass"), row("q2", "primary", "fail")],
            "Pairs are waiting for a leg",
            id="only_primary_legs",
        ),
    ],
)
def test_no_pairs_says_so_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]], hint: str
) -> None:
    """No empty tables and no "McNemar p 1": a sentence saying why, and what to do."""
    assert main(["compare", "--results", str(write_jsonl(tmp_path / "r.jsonl", rows))]) == 0
    text = capsys.readouterr().out
    assert text.startswith("no complete primary/shadow pairs in 2 rows")
    assert hint in text
    assert "McNemar" not in text


def test_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--results", str(write_jsonl(tmp_path / "r.jsonl",
                                                         example_rows()))]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert text.startswith("7 complete pairs from 21 rows")
    lines = {line.split()[0]: line.split() for line in text.splitlines()[1:] if line.strip()}
    assert lines["A"] == ["A", "5", "40.0%", "60.0%", "+20.0pp", "20.0%", "20.0%", "2", "1", "2",
                          "1"]  # fmt: skip
    assert lines["enum_value_changed"][1:5] == ["2", "100.0%", "50.0%", "-50.0pp"]
    assert lines["all"][1:4] == ["7", "57.1%", "57.1%"]


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        pytest.param('{"task_id":"A","result":"pass"}\n{not json\n', 2, "not JSON at column 2",
                     id="bad_json"),
        pytest.param("[1, 2]\n", 1, "expected a result row", id="not_an_object"),
        pytest.param('{"result":"pass"}\n', 1, "'task_id' and 'result'", id="no_task_id"),
        pytest.param('{"task_id":"A","result":1}\n', 1, "'task_id' and 'result'",
                     id="result_not_a_string"),
        pytest.param('{"task_id":"A","result":"pass","variant":"canary"}\n', 1, "'variant'",
                     id="unknown_variant"),
        pytest.param('\n\n{"task_id":"A","result":"pass","choice":"0"}\n', 3, "'choice'",
                     id="choice_not_an_integer_after_blank_lines"),
        pytest.param('{"task_id":"A","result":"pass","pair_id":7}\n', 1, "'pair_id'",
                     id="pair_id_not_a_string"),
    ],
)  # fmt: skip
def test_unreadable_input_is_skipped_and_named_or_refused_under_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, line: int, message: str
) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", example_rows())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["compare", "--json", "--results", str(good), str(bad)]) == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    [problem] = data["input"]["problems"]
    assert (problem["file"], problem["line"]) == (str(bad), line)
    lines = sum(1 for text in content.splitlines() if text.strip())
    assert data["input"]["rows"] == len(example_rows()) + lines
    assert f"{bad}:{line}: " in captured.err
    assert message in captured.err
    assert main(["compare", "--strict", "--json", "--results", str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{bad}:{line}: " in captured.err
    assert message in captured.err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--results", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: cannot read" in capsys.readouterr().err


async def test_the_proxys_own_result_file_compares(
    make_shadow_proxy: ProxyFactory,
    shadow_url: str,
    primary: PlanBackend,
    results_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """End to end: live traffic through a shadowed proxy, then `gradeproxy compare` on the
    rows it wrote (1 loss, 9 wins, 2 ties → p = 11/512)."""
    client = await make_shadow_proxy(upstream={"shadow": {"url": shadow_url}})
    plan = [("fail", "pass")] * 9 + [("pass", "stale")] + [("stale", "fail"), ("pass", "pass")]
    for primary_result, shadow_result in plan:
        await client.post(
            "/v1/chat/completions",
            data=plan_request(primary_result, shadow_result),
            headers={"X-Grade-Task": "weather.single"},
        )
    await client.get("/v1/models")  # ungraded traffic leaves no rows
    await settle(client, results_path)
    out = compare_json(capsys, results_path)
    assert (out["rows"], out["pairs"], out["unpaired_rows"]) == (24, 12, 0)
    task = out["by_task"]["weather.single"]
    assert (task["wins"], task["losses"], task["ties"]) == (9, 1, 2)
    assert task["mcnemar"]["p_value_exact"] == "11/512"
    assert task["primary"]["stale"] == 1
    assert task["shadow"]["stale"] == 1
    assert list(out["by_mutation_kind"]) == ["field_renamed"]


# (rows: (pair, choice, primary result, primary cost, shadow result, shadow cost), cost section)
COSTED = [
    pytest.param(
        [("c1", 0, "pass", 0.02, "pass", 0.005), ("c2", 0, "fail", 0.02, "pass", 0.005),
         ("c3", 0, "pass", 0.02, "fail", 0.005)],
        {"primary": {"cost": 0.06, "priced_responses": 3, "pass": 2, "cost_per_pass": 0.03},
         "shadow": {"cost": 0.015, "priced_responses": 3, "pass": 2, "cost_per_pass": 0.0075}},
        id="cost_over_passing_answers_per_variant",
    ),
    pytest.param(
        [("c1", 0, "pass", 0.02, "pass", 0.01), ("c1", 1, "pass", 0.02, "fail", 0.01)],
        {"primary": {"cost": 0.02, "priced_responses": 1, "pass": 2, "cost_per_pass": 0.01},
         "shadow": {"cost": 0.01, "priced_responses": 1, "pass": 1, "cost_per_pass": 0.01}},
        id="n_choices_cost_their_response_once",
    ),
    pytest.param(
        [("c1", 0, "fail", 0.02, "pass", None), ("c2", 0, "fail", 0.02, "pass", None)],
        {"primary": {"cost": 0.04, "priced_responses": 2, "pass": 0, "cost_per_pass": None},
         "shadow": {"cost": 0.0, "priced_responses": 0, "pass": 2, "cost_per_pass": 0.0}},
        id="no_pass_no_ratio_and_an_unpriced_side_says_so",
    ),
    pytest.param([("c1", 0, "pass", None, "pass", None)], None, id="rows_without_cost"),
]  # fmt: skip


@pytest.mark.parametrize(("pairs", "expected"), COSTED)
def test_compare_reports_cost_per_passing_answer_per_variant(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pairs: list[tuple[str, int, str, float | None, str, float | None]],
    expected: Any,
) -> None:
    rows = [
        r
        for pair, choice, p_result, p_cost, s_result, s_cost in pairs
        for r in (
            row(pair, "primary", p_result, choice=choice, cost=p_cost),
            row(pair, "shadow", s_result, choice=choice, cost=s_cost),
        )
    ]
    out = compare_json(capsys, write_jsonl(tmp_path / "r.jsonl", rows))
    if expected is None:
        assert out["cost"] is None
    else:
        for variant in ("primary", "shadow"):
            got, want = out["cost"][variant], expected[variant]
            assert got == {**want, "cost": pytest.approx(want["cost"]),
                           "cost_per_pass": pytest.approx(want["cost_per_pass"])}  # fmt: skip
    assert main(["compare", "--results", str(tmp_path / "r.jsonl")]) == 0
    table = capsys.readouterr().out
    assert ("cost per passing answer" in table) == (expected is not None)


def test_a_cost_that_is_not_a_number_is_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [row("c1", "primary", "pass", cost="0.02"), row("c1", "shadow", "pass")]
    assert main(["compare", "--json", "--results", str(write_jsonl(tmp_path / "r", rows))]) == 1
    assert "'cost' must be a number or null" in capsys.readouterr().err
