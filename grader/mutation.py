"""Fixture mutation (seed 003): prove each check reads the model's answer.

For every column of every check, grade the task's *reference answer* and a set of mutations of
it. The reference answer is the first fixture with ``"passes": true`` in ``metadata.fixtures``,
else the task's ``expected`` call in the proxy's wire shape. It must pass (else
``reference_fails``). Counted mutations:

* ``empty`` (``""``), ``unrelated_text`` (a refusal), ``unrelated_call`` (another tool);
* for checks with ``{{sample.*}}`` templates, the value each template reads replaced by ``""``
  (``empty_value``) and by ``UNRELATED`` (``unrelated_value``);
* for policy checks, the reference calls plus each forbidden call, and each link's source
  argument changed;
* every fixture (``{"answer", "passes": bool | {column: bool}, "item"?, "id"?}``), whose
  expectations must also hold (else ``fixture_mismatch``).

A column whose verdict no counted mutation changes is ``disconnected``: its verdict does not
depend on the answer. Ungraded results (``passed=None``) prove nothing either way. For string
checks the wrong-case, extra-text and trailing-newline variants are reported as ``info``: they
show where the boundary sits, and either verdict may be right for the product.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from grader.checks import Check, CheckResult
from grader.checks.build import columns_of
from grader.checks.judge import Judge
from grader.checks.policy import PolicyCheck
from grader.checks.sample import CheckContext, Sample, sample_calls
from grader.checks.templates import TemplateError, resolve, with_value
from grader.engine import checks_of
from grader.json import dumps, loads_exact
from grader.tasks import Task

Level = Literal[
    "ok", "info", "skipped", "disconnected", "reference_fails", "fixture_mismatch", "invalid"
]
PROBLEMS: frozenset[Level] = frozenset(
    {"disconnected", "reference_fails", "fixture_mismatch", "invalid"}
)
UNRELATED_TEXT = "I'm sorry, I can't help with that request."
UNRELATED_CALL = {"name": "unrelated_tool", "arguments": {"query": "unrelated"}}


@dataclass(frozen=True, slots=True)
class Finding:
    task_id: str
    column: str
    level: Level
    message: str


@dataclass(frozen=True, slots=True)
class Fixture:
    id: str
    answer: str
    item: Mapping[str, Any] | None
    passes: bool | Mapping[str, bool]

    def expects(self, column: str) -> bool | None:
        if isinstance(self.passes, bool):
            return self.passes
        return self.passes.get(column)


@dataclass(frozen=True, slots=True)
class Mutation:
    label: str
    sample: Sample
    counted: bool  # False: reported as info only


def wire_answer(calls: list[dict[str, Any]]) -> str:
    """Calls in the shape the proxy hands the grader: ``{"tool_calls": [...]}``."""
    return dumps(
        {
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": dumps(c["arguments"]).decode()},
                }
                for i, c in enumerate(calls)
            ]
        }
    ).decode()


def _answer_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        return dumps(value).decode()
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return wire_answer([{"name": value["name"], "arguments": value.get("arguments", {})}])
    raise ValueError("'answer' must be a string, a call {name, arguments} or {tool_calls}")


def fixtures_of(task: Task) -> list[Fixture]:
    """Parse ``metadata.fixtures``; raise ``ValueError`` naming the bad fixture."""
    raw = task.metadata.get("fixtures", [])
    if not isinstance(raw, list):
        raise ValueError("'metadata.fixtures' must be a list")
    fixtures = []
    for index, entry in enumerate(raw):
        where = f"metadata.fixtures[{index}]"
        if not isinstance(entry, dict) or "answer" not in entry or "passes" not in entry:
            raise ValueError(f"{where} needs 'answer' and 'passes'")
        passes = entry["passes"]
        if not isinstance(passes, bool) and not (
            isinstance(passes, dict) and all(isinstance(v, bool) for v in passes.values())
        ):
            raise ValueError(f"{where}: 'passes' must be true/false or {{column: true/false}}")
        item = entry.get("item")
        if item is not None and not isinstance(item, dict):
            raise ValueError(f"{where}: 'item' must be an object")
        try:
            answer = _answer_text(entry["answer"])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        fixtures.append(Fixture(str(entry.get("id", index)), answer, item, passes))
    return fixtures


def _value_mutations(check: Check, sample: Sample, item: Mapping[str, Any]) -> list[Mutation]:
    out: list[Mutation] = []
    for template in getattr(check, "templates", ()):
        for ref in template.refs:
            try:
                value = resolve(ref, sample, item)
            except TemplateError:
                continue
            if not isinstance(value, str):
                continue
            variants = [
                ("empty_value", "", True),
                ("unrelated_value", "UNRELATED", True),
                ("wrong_case", value.swapcase(), False),
                ("extra_text", f"The answer is: {value}", False),
                ("trailing_newline", value + "\n", False),
            ]
            for label, new, counted in variants:
                if new == value:
                    continue
                mutated = with_value(sample, ref, new)
                if mutated is not None:
                    out.append(Mutation(f"{label}({ref.text})", mutated, counted))
    return out


def _policy_mutations(check: PolicyCheck, sample: Sample) -> list[Mutation]:
    calls = [
        {"name": c.name, "arguments": c.arguments}
        for c in sample_calls(sample)
        if c.name is not None and c.arguments is not None
    ]
    out: list[Mutation] = []
    for name, arguments in check.forbidden or ():
        args: dict[str, Any] = {}
        for path, value in arguments:
            *parents, last = path.split(".")
            node = args
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = value
        bad = wire_answer([*calls, {"name": name, "arguments": args}])
        out.append(Mutation(f"forbidden({name})", Sample.from_answer(bad), True))
    for link in check.links or ():
        changed = []
        for call in calls:
            new_args = loads_exact(dumps(call["arguments"]).decode())  # a deep copy
            if call["name"] == link.source_tool:
                *parents, last = link.source_path.split(".")
                target: Any = new_args
                for key in parents:
                    target = target.get(key) if isinstance(target, dict) else None
                if isinstance(target, dict) and last in target:
                    target[last] = "UNRELATED"
            changed.append({"name": call["name"], "arguments": new_args})
        if changed != calls:
            mutated = Sample.from_answer(wire_answer(changed))
            out.append(Mutation(f"link({link.text})", mutated, True))
    return out


def mutations(check: Check, reference: Sample, item: Mapping[str, Any]) -> list[Mutation]:
    """Every mutation of the reference answer that ``check`` is graded on."""
    out = [
        Mutation("empty", Sample.from_answer(""), True),
        Mutation("unrelated_text", Sample.from_answer(UNRELATED_TEXT), True),
        Mutation("unrelated_call", Sample.from_answer(wire_answer([UNRELATED_CALL])), True),
    ]
    out += _value_mutations(check, reference, item)
    if isinstance(check, PolicyCheck):
        out += _policy_mutations(check, reference)
    return out


async def _columns(
    check: Check, sample: Sample, item: Mapping[str, Any], ctx: CheckContext, judge: Judge | None
) -> dict[str, CheckResult]:
    try:
        result = await check.arun(sample, item, ctx, judge)
    except Exception as exc:  # a crashing check is reported, not raised
        crashed = f"check raised {type(exc).__name__}: {exc}"
        return {
            c: CheckResult(c, check.type, None, None, crashed, "check_error", crashed, check.digest)
            for c in columns_of(check)
        }
    return {r.name: r for r in (result.parts or (result,))}


def _verdict(result: CheckResult | None) -> str:
    if result is None or result.passed is None:
        return "ungraded"
    return "pass" if result.passed else "fail"


async def analyse_task(task: Task, judge: Judge | None = None) -> list[Finding]:
    """Findings for every column of every check of ``task`` (see the module docstring)."""
    episode: list[Finding] = []
    if task.episode is not None:  # the record's columns, proved by its episode fixtures
        from grader.episodes.fixtures import findings as episode_findings

        found = episode_findings(task.id, task.episode, task.metadata, task.item)
        episode = [Finding(task.id, column, level, message) for column, level, message in found]
        if not task.checks:
            return episode
    try:
        fixtures = fixtures_of(task)
    except ValueError as exc:
        return [Finding(task.id, "-", "invalid", str(exc))]
    item = task.item
    tools = task.raw.get("tools")
    ctx = CheckContext(request_tools=tools if isinstance(tools, list) else None)
    reference = next((f for f in fixtures if f.passes is True), None)
    if reference is not None:
        ref_sample, ref_item = Sample.from_answer(reference.answer), reference.item or item
    elif task.expected_call is not None:
        call = task.expected_call
        wire = wire_answer([{"name": call.name, "arguments": call.arguments}])
        ref_sample, ref_item = Sample.from_answer(wire), item
    else:
        message = "no reference answer: give 'expected' or a fixture with \"passes\": true"
        return [Finding(task.id, "-", "invalid", message)]
    findings: list[Finding] = []
    for check in checks_of(task):
        if check.needs_judge and judge is None:
            for column in columns_of(check):
                findings.append(Finding(task.id, column, "skipped", "judge check: pass --judge"))
            continue
        findings += await _analyse_check(
            task.id, check, ref_sample, ref_item, fixtures, item, ctx, judge
        )
    return episode + findings


async def _analyse_check(
    task_id: str,
    check: Check,
    ref_sample: Sample,
    ref_item: Mapping[str, Any],
    fixtures: list[Fixture],
    item: Mapping[str, Any],
    ctx: CheckContext,
    judge: Judge | None,
) -> list[Finding]:
    findings: list[Finding] = []
    reference = await _columns(check, ref_sample, ref_item, ctx, judge)
    graded: list[tuple[str, bool, dict[str, CheckResult]]] = []
    for mutation in mutations(check, ref_sample, ref_item):
        graded.append(
            (
                mutation.label,
                mutation.counted,
                await _columns(check, mutation.sample, ref_item, ctx, judge),
            )
        )
    for fixture in fixtures:
        results = await _columns(
            check, Sample.from_answer(fixture.answer), fixture.item or item, ctx, judge
        )
        graded.append((f"fixture {fixture.id}", True, results))
        for column, result in results.items():
            want = fixture.expects(column)
            if want is not None and result.passed is not want:
                findings.append(
                    Finding(
                        task_id,
                        column,
                        "fixture_mismatch",
                        f"fixture {fixture.id}: expected {'pass' if want else 'fail'}, got "
                        f"{_verdict(result)} ({result.reason})",
                    )
                )
    for column in columns_of(check):
        ref = reference.get(column)
        if ref is None or ref.passed is not True:
            why = ref.reason if ref is not None else "no result"
            findings.append(
                Finding(
                    task_id,
                    column,
                    "reference_fails",
                    f"the reference answer does not pass: {_verdict(ref)} ({why})",
                )
            )
            continue
        flips = [
            label
            for label, counted, res in graded
            if counted and (r := res.get(column)) is not None and r.passed is False
        ]
        info = [
            f"{label}: {_verdict(res.get(column))}" for label, counted, res in graded if not counted
        ]
        if not flips:
            tried = ", ".join(
                f"{label}: {_verdict(res.get(column))}" for label, counted, res in graded if counted
            )
            findings.append(
                Finding(
                    task_id, column, "disconnected", f"no mutation changes the verdict ({tried})"
                )
            )
        else:
            findings.append(Finding(task_id, column, "ok", "fails on " + ", ".join(flips)))
        if info:
            findings.append(Finding(task_id, column, "info", "; ".join(info)))
    return findings
