"""BFCL conformance harness: BFCL's own AST checker and our ``tool_call`` check, same answers.

BFCL's checker itself is loaded, pinned, by :mod:`tests.support.bfcl_checker`.

Items: BFCL_v4 simple_python, multiple, parallel, parallel_multiple (1,000 items) and
irrelevance (240), read from the installed package. Each item's answers are the ten mutation
kinds of the issue (:func:`mutations`), built deterministically from the item itself, written
as the tool-call JSON a client receives. BFCL grades them after its OpenAI FC decode step
(``json.loads`` of each call's ``arguments``); we grade the same text through the imported task.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.checks import CheckContext, Sample
from grader.engine import checks_of
from grader.importers.bfcl import NO_CALL_ANSWER, convert, tool_name
from grader.loader import parse_task
from tests.support.bfcl_checker import MODEL, load_bfcl

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
WRONG = "zzqx"  # survives BFCL's standardisation, so a changed string stays changed


@dataclass(frozen=True)
class Item:
    category: str
    question: dict[str, Any]
    answer: dict[str, Any] | None  # None for irrelevance


@dataclass(frozen=True)
class Case:
    item: Item
    kind: str
    label: str
    calls: list[tuple[str, dict[str, Any]]] | None  # None: a text answer without calls

    @property
    def wire(self) -> str:
        """The answer as the proxy hands it over: tool_calls with JSON-string arguments."""
        if self.calls is None:
            return NO_CALL_ANSWER
        tool_calls = [
            {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for n, a in self.calls
        ]
        return json.dumps({"tool_calls": tool_calls})


def load_items(data: Path) -> list[Item]:
    items: list[Item] = []
    for category in CATEGORIES:
        questions = _jsonl(data / f"BFCL_v4_{category}.json")
        answers_path = data / "possible_answer" / f"BFCL_v4_{category}.json"
        answers = {a["id"]: a for a in _jsonl(answers_path)} if answers_path.exists() else {}
        items.extend(Item(category, q, answers.get(q["id"])) for q in questions)
    return items


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# --- mutations -------------------------------------------------------------------------------


def _doc(item: Item, name: str) -> dict[str, Any]:
    return next(d for d in item.question["function"] if d["name"] == name)


def _reference(item: Item) -> list[tuple[str, dict[str, Any], dict[str, list[Any]], str]]:
    """(tool name, first-choice arguments, possible values, BFCL name) of each expected call."""
    out = []
    assert item.answer is not None
    for expected in item.answer["ground_truth"]:
        ((name, possible),) = expected.items()
        props = _doc(item, name)["parameters"]["properties"]
        args = {}
        for param, values in possible.items():
            present = [v for v in values if v != ""]
            if present and (param in props or "" not in values):
                args[param] = _first(present[0])
        out.append((tool_name(name), args, possible, name))
    return out


def _first(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _first(v[0]) for k, v in value.items() if v and v[0] != ""}
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return [_first(v) for v in value]
    return value


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + WRONG
    if isinstance(value, list):
        return [*value, value[0]] if value else [WRONG]
    return {**value, WRONG: 1} if isinstance(value, dict) else WRONG


def _numbers(value: Any) -> bool:
    """A non-empty array of numbers (booleans excluded)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def _case_changed(value: Any) -> Any:
    if isinstance(value, str):
        return value.swapcase()
    if isinstance(value, list):
        return [_case_changed(v) for v in value]
    return value


def mutations(item: Item) -> Iterator[Case]:
    """The ten mutation kinds, each applied to every eligible parameter of the first call."""
    if item.answer is None:
        yield Case(item, "canonical", "no call", None)
        first = item.question["function"][0]
        yield Case(item, "wrong_name", "a call", [(tool_name(first["name"]), {})])
        yield Case(item, "calls", "empty tool_calls", [])
        return
    ref = _reference(item)
    calls = [(n, a) for n, a, _, _ in ref]

    def with_args(index: int, args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(n, args if i == index else a) for i, (n, a) in enumerate(calls)]

    yield Case(item, "canonical", "reference", calls)
    for index, (_name, args, possible, bfcl_name) in enumerate(ref[:2]):
        doc = _doc(item, bfcl_name)
        required = set(doc["parameters"].get("required", []))
        for param, values in possible.items():
            present = [v for v in values if v != ""]
            at = f"call {index} {param}"
            others = [v for v in present[1:] if _first(v) != args.get(param)]
            if others:
                alt = {**args, param: _first(others[0])}
                yield Case(item, "acceptable", at, with_args(index, alt))
            if param in args:
                dropped = {k: v for k, v in args.items() if k != param}
                kind = "required_omitted" if param in required else "optional_omitted"
                if "" in values or param in required:
                    yield Case(item, kind, at, with_args(index, dropped))
                value = args[param]

                def changed(
                    new: Any, i: int = index, a: dict[str, Any] = args, p: str = param
                ) -> list[tuple[str, dict[str, Any]]]:
                    return with_args(i, {**a, p: new})

                yield Case(item, "wrong_value", at, changed(_wrong(value)))
                if isinstance(value, int) and not isinstance(value, bool):
                    yield Case(item, "int_float", at, changed(float(value)))
                elif isinstance(value, float) and value.is_integer():
                    yield Case(item, "int_float", at, changed(int(value)))
                elif _numbers(value):
                    flipped = [float(v) if isinstance(v, int) else int(v) for v in value]
                    if all(isinstance(v, int) or v.is_integer() for v in value):
                        yield Case(item, "int_float", f"{at} elements", changed(flipped))
                if _case_changed(value) != value:
                    yield Case(item, "case_change", at, changed(_case_changed(value)))
        renamed = [(n + "_x" if i == index else n, a) for i, (n, a) in enumerate(calls)]
        yield Case(item, "wrong_name", f"call {index}", renamed)
        extra = {**args, "unexpected_param": 1}
        yield Case(item, "extra_param", f"call {index}", with_args(index, extra))
    yield Case(item, "calls", "duplicated first", [calls[0], *calls])
    yield Case(item, "calls", "first dropped", calls[1:])
    if len(calls) > 1:
        yield Case(item, "calls", "reversed", list(reversed(calls)))
    # The acceptable value of one call given to its sibling of the same function (issue 16).
    for i, (name, args, possible, _) in enumerate(ref):
        for j, (other, other_args, _, _) in enumerate(ref):
            if i != j and name == other:
                for param in possible:
                    if param not in other_args and param in args:
                        swapped = {**other_args, param: args[param]}
                        label = f"call {j} gets {param}"
                        yield Case(item, "extra_param", label, with_args(j, swapped))
                        break


# --- verdicts --------------------------------------------------------------------------------


class Conformance:
    """Both checkers, loaded once."""

    def __init__(self) -> None:
        self.ast_checker, self.language, self.is_empty, self.data = load_bfcl()
        self.items = load_items(self.data)
        self._tasks: dict[str, Any] = {}

    def bfcl(self, case: Case) -> bool:
        decoded = [] if case.calls is None else self.decode(case.wire)
        if case.item.answer is None:
            return bool(self.is_empty(decoded))
        result = self.ast_checker(
            case.item.question["function"],
            decoded,
            case.item.answer["ground_truth"],
            self.language.PYTHON,
            case.item.category,
            MODEL,
        )
        return bool(result["valid"])

    @staticmethod
    def decode(wire: str) -> list[dict[str, Any]]:
        """BFCL's OpenAI FC decode step: ``{name: json.loads(arguments)}`` per call."""
        calls = json.loads(wire)["tool_calls"]
        return [{c["function"]["name"]: json.loads(c["function"]["arguments"])} for c in calls]

    def task(self, item: Item) -> Any:
        found = self._tasks.get(item.question["id"])
        if found is None:
            found = parse_task(convert(item.question, copy.deepcopy(item.answer)))
            self._tasks[item.question["id"]] = found
        return found

    def ours(self, case: Case) -> bool:
        (check,) = checks_of(self.task(case.item))
        result = check.run(Sample.from_answer(case.wire), {}, CheckContext())
        return result.passed is True

    def cases(self) -> Iterator[Case]:
        for item in self.items:
            yield from mutations(item)


def disagreements(conf: Conformance) -> tuple[int, list[dict[str, Any]], dict[str, list[int]]]:
    """(cases compared, disagreements, per-kind [agree, total])."""
    total = 0
    found = []
    per_kind: dict[str, list[int]] = {}
    for case in conf.cases():
        total += 1
        theirs, ours = conf.bfcl(case), conf.ours(case)
        tally = per_kind.setdefault(case.kind, [0, 0])
        tally[1] += 1
        if theirs == ours:
            tally[0] += 1
        else:
            found.append(
                {
                    "id": case.item.question["id"],
                    "kind": case.kind,
                    "case": case.label,
                    "bfcl": theirs,
                    "ours": ours,
                }
            )
    return total, found, per_kind
