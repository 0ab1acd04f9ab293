"""``string_check``: OpenAI's string grader, exactly (seed 003).

``{"type": "string_check", "name", "operation": "eq"|"ne"|"like"|"ilike", "input", "reference"}``

* ``eq`` — the whole strings are equal, code point for code point: no trimming, no case folding
  (``"BILLING\\n"`` is not ``"BILLING"``: representation is the contract);
* ``ne`` — whole-string inequality, *not* "must not contain": ``"the secret is 123"`` passes
  ``ne "secret"``;
* ``like`` — ``reference`` occurs inside ``input``, case-sensitively (negation around it still
  passes: ``"It is false that this may produce inaccurate results"`` contains the phrase);
* ``ilike`` — the same, ignoring case (Unicode case folding).

Validation refuses a check that cannot read the model's answer: one side must come from the
sample, and the two sides must not both come only from the sample (the answer compared with
itself) — the "looks symmetrical in review" traps of seed 003.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from grader.checks._base import BaseCheck, CheckContext, CheckResult, Sample, Spec
from grader.checks.templates import Template, TemplateError, parse_template, unresolved

Operation = Literal["eq", "ne", "like", "ilike"]
OPERATIONS: tuple[Operation, ...] = ("eq", "ne", "like", "ilike")
_HINTS = {
    "neq": "use 'ne' (the API schema's spelling; a grader guide bullet says 'neq')",
    "!=": "use 'ne'",
    "==": "use 'eq'",
    "contains": "use 'like' (case-sensitive) or 'ilike' (case-insensitive)",
    "equals": "use 'eq'",
}
_SHOWN = 80


def require_connected(spec: Spec, input_t: Template, reference_t: Template) -> None:
    """Refuse input/reference pairs whose verdict cannot depend on the model's answer."""
    sides = (input_t.namespaces, reference_t.namespaces)
    if not any("sample" in side for side in sides):
        raise spec.error(
            "input",
            "and 'reference' never read the model's answer: one side needs a {{sample.*}} "
            "template, or every answer gets the same verdict",
        )
    if sides[0] == sides[1] == frozenset({"sample"}):
        raise spec.error(
            "reference",
            "reads only {{sample.*}}, like 'input': the check compares the answer with "
            "itself; put the expected value (literal or {{item.*}}) on one side",
        )


def shown(text: str) -> str:
    """``repr`` of a string, shortened: shows the invisible characters seed 003 asks for."""
    return repr(text) if len(text) <= _SHOWN else repr(text[: _SHOWN - 1]) + "…"


def compare(operation: Operation, left: str, right: str) -> bool:
    if operation == "eq":
        return left == right
    if operation == "ne":
        return left != right
    if operation == "like":
        return right in left
    return right.casefold() in left.casefold()


@dataclass(frozen=True, slots=True)
class StringCheck(BaseCheck):
    operation: Operation
    input: Template
    reference: Template

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> StringCheck:
        spec = Spec(definition, where, frozenset({"operation", "input", "reference"}))
        operation = definition.get("operation")
        if operation not in OPERATIONS:
            hint = _HINTS.get(operation) if isinstance(operation, str) else None
            raise spec.error(
                "operation",
                f"is {operation!r}: must be one of {', '.join(OPERATIONS)}"
                + (f"; {hint}" if hint else ""),
            )
        input_t = parse_template(spec.str_("input"), spec.where)
        reference_t = parse_template(spec.str_("reference"), spec.where)
        require_connected(spec, input_t, reference_t)
        return cls(spec.name, "string_check", spec.digest(), operation, input_t, reference_t)

    @property
    def templates(self) -> tuple[Template, ...]:
        return (self.input, self.reference)

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        try:
            left = self.input.render(sample, item)
            right = self.reference.render(sample, item)
        except TemplateError as exc:
            return unresolved(self, exc)
        passed = compare(self.operation, left, right)
        verb = {"eq": "==", "ne": "!=", "like": "contains", "ilike": "contains (any case)"}
        reason = f"{shown(left)} {verb[self.operation]} {shown(right)}: {passed}"
        return self.result(passed, reason, "string_match" if passed else "string_mismatch")
