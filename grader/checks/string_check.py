"""``string_check``: OpenAI's string grader, exactly (seed 003).

``{"type": "string_check", "name", "operation": "eq"|"ne"|"like"|"ilike", "input", "reference",
"normalize"?: "exact_match"}``

* ``eq`` — the whole strings are equal, code point for code point: no trimming, no case folding
  (``"BILLING\\n"`` is not ``"BILLING"``: representation is the contract);
* ``ne`` — whole-string inequality, *not* "must not contain": ``"the secret is 123"`` passes
  ``ne "secret"``;
* ``like`` — ``reference`` occurs inside ``input``, case-sensitively (negation around it still
  passes: ``"It is false that this may produce inaccurate results"`` contains the phrase);
* ``ilike`` — the same, ignoring case (Unicode case folding).

``normalize: "exact_match"`` (ours, seed 002's "exact match with normalization") applies, to
both sides before the operation, exactly the seed's ``normalize``: ``strip()``, ``lower()``,
every character matching ``[^\\w\\s.]`` removed (so ``.`` and ``_`` are kept: ``"3.5"`` stays
``"3.5"``, ``"snake_case"`` stays itself), then each whitespace run replaced by one space. It
merges case, punctuation other than ``.``/``_`` (``"U.S.A!"`` == ``"u.s.a"``, ``"don't"`` ==
``"dont"``, ``"3,500"`` == ``"3500"``, ``"$5"`` == ``"5"``) and whitespace runs. As in the seed,
the strip comes first, so punctuation at an edge can leave a space (``"! hi"`` -> ``" hi"``).

Validation refuses a check that cannot read the model's answer: one side must come from the
sample, and the two sides must not both come only from the sample (the answer compared with
itself) — the "looks symmetrical in review" traps of seed 003. A reversed containment is
refused too: ``like``/``ilike`` test that ``reference`` occurs inside ``input``, so the answer in
``reference`` with a literal phrase as ``input`` asks whether the answer is part of the phrase.
(An ``{{item.*}}`` input stays allowed: "the answer is a span of the item's passage" is a real
check.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from grader.checks._base import BaseCheck, CheckResult, Spec
from grader.checks.sample import CheckContext, Sample
from grader.checks.templates import Template, TemplateError, parse_template, unresolved
from grader.values import value_type

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
NORMALIZATIONS = ("exact_match",)
_PUNCTUATION = re.compile(r"[^\w\s.]")
_WHITESPACE = re.compile(r"\s+")


def exact_match_normalize(text: str) -> str:
    """Seed 002's ``normalize``, regex for regex."""
    text = text.strip().lower()
    text = _PUNCTUATION.sub("", text)
    return _WHITESPACE.sub(" ", text)


def require_connected(
    spec: Spec, input_t: Template, reference_t: Template, operation: str = "eq"
) -> None:
    """Refuse input/reference pairs whose verdict cannot depend on the model's answer."""
    sides = (input_t.namespaces, reference_t.namespaces)
    if not any("sample" in side for side in sides):
        raise spec.error(
            "input",
            "and 'reference' never read the model's answer: one side needs a {{sample.*}} "
            "template, or every answer gets the same verdict",
        )
    if operation in ("like", "ilike") and "sample" in sides[1] and not sides[0]:
        raise spec.error(
            "reference",
            f"reads the answer while 'input' is a literal: {operation!r} tests that reference "
            "occurs inside input, so this asks whether the answer is part of the literal "
            "phrase; swap them (input: the answer, reference: the required phrase)",
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


@value_type
class StringCheck(BaseCheck):
    operation: Operation
    input: Template
    reference: Template
    normalize: str | None = None

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> StringCheck:
        spec = Spec(definition, where, frozenset({"operation", "input", "reference", "normalize"}))
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
        require_connected(spec, input_t, reference_t, operation)
        normalize = definition.get("normalize")
        if normalize is not None and normalize not in NORMALIZATIONS:
            raise spec.error("normalize", f"must be one of {', '.join(NORMALIZATIONS)}")
        return cls(
            spec.name, "string_check", spec.digest(), operation, input_t, reference_t, normalize
        )

    @property
    def templates(self) -> tuple[Template, ...]:
        return (self.input, self.reference)

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        try:
            left = self.input.render(sample, item)
            right = self.reference.render(sample, item)
        except TemplateError as exc:
            return unresolved(self, exc)
        if self.normalize is not None:
            left, right = exact_match_normalize(left), exact_match_normalize(right)
        passed = compare(self.operation, left, right)
        verb = {"eq": "==", "ne": "!=", "like": "contains", "ilike": "contains (any case)"}
        reason = f"{shown(left)} {verb[self.operation]} {shown(right)}: {passed}"
        return self.result(passed, reason, "string_match" if passed else "string_mismatch")
