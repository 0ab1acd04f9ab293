"""``multi``: OpenAI's multi grader — named sub-checks combined by an arithmetic formula.

``{"type": "multi", "name", "graders": {"<key>": <check>, ...}, "calculate_output": "<formula>",
"pass_threshold": 1.0}``

Each sub-check contributes its reward (its score, else 1.0 / 0.0). The formula is arithmetic
over the keys: ``+ - * /``, unary minus, numbers, parentheses and ``min(...)`` / ``max(...)``.
It is parsed with :mod:`ast` and only those node types are accepted, then evaluated by walking
the tree — never ``eval``. The result is the check's ``score``; the check passes when
``score >= pass_threshold`` (our addition; default 1.0, so a formula that averages binary
sub-checks passes only when all pass). A sub-check that could not reach a verdict makes the
whole check an infrastructure error (``sub_check_error``); so does division by zero.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from grader.checks._base import BaseCheck, Check, CheckResult, Spec
from grader.checks.sample import CheckContext, Sample
from grader.checks.templates import Template
from grader.errors import GraderError
from grader.values import value_type

if TYPE_CHECKING:
    from grader.checks.judge import Judge

MAX_FORMULA_CHARS = 500  # bounds ast.parse's recursion on pathological parentheses
_FUNCTIONS: Mapping[str, Callable[..., float]] = {"min": min, "max": max}
_BINARY: Mapping[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


class FormulaError(GraderError, ValueError):
    """The formula is not the safe arithmetic ``multi`` accepts."""


def parse_formula(text: str, names: frozenset[str]) -> ast.expr:
    """Parse and whitelist a formula; raise :class:`FormulaError` naming what is refused."""
    if len(text) > MAX_FORMULA_CHARS:
        raise FormulaError(f"is longer than {MAX_FORMULA_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise FormulaError(f"is not an arithmetic expression: {exc}") from None
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        _check_node(node, names, called)
    return tree.body


def _check_node(node: ast.AST, names: frozenset[str], called: set[int]) -> None:
    if isinstance(node, ast.Expression | ast.Load | ast.operator | ast.unaryop):
        if isinstance(node, ast.operator) and type(node) not in _BINARY:
            raise FormulaError(f"uses the operator {type(node).__name__}; allowed: + - * /")
        if isinstance(node, ast.unaryop) and not isinstance(node, ast.USub | ast.UAdd):
            raise FormulaError(f"uses the operator {type(node).__name__}")
        return
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise FormulaError(f"holds the constant {node.value!r}; only numbers are allowed")
        return
    if isinstance(node, ast.Name):
        if id(node) in called:
            return  # the function of a call: ast.Call below admits only min and max
        if node.id not in names:
            raise FormulaError(f"names {node.id!r}, which is not one of the graders")
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise FormulaError("calls a function other than min or max")
        if node.keywords or not node.args:
            raise FormulaError(f"{node.func.id}() takes one or more positional arguments")
        return
    raise FormulaError(f"uses {type(node).__name__}, which is not allowed")


def evaluate_formula(node: ast.expr, values: Mapping[str, float]) -> float:
    """Walk a whitelisted tree; raise ``ZeroDivisionError`` or ``ArithmeticError`` on bad maths."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = evaluate_formula(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        left = evaluate_formula(node.left, values)
        right = evaluate_formula(node.right, values)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return float(_FUNCTIONS[node.func.id](*(evaluate_formula(a, values) for a in node.args)))
    raise FormulaError(f"unexpected node {type(node).__name__}")  # parse_formula refuses it


Builder = Callable[[Mapping[str, Any], str], Check]


@value_type
class MultiCheck(BaseCheck):
    graders: tuple[tuple[str, Check], ...]
    formula: ast.expr
    formula_text: str
    threshold: float

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str, builder: Builder) -> MultiCheck:
        spec = Spec(definition, where, frozenset({"graders", "calculate_output", "pass_threshold"}))
        raw = definition.get("graders")
        if not isinstance(raw, dict) or not raw:
            raise spec.error("graders", "must map names to check definitions")
        graders: list[tuple[str, Check]] = []
        for key, sub in raw.items():
            if not key.isidentifier() or key in _FUNCTIONS:
                raise spec.error(f"graders.{key}", "name must be an identifier other than min/max")
            if not isinstance(sub, dict):
                raise spec.error(f"graders.{key}", "must be a check definition object")
            if sub.get("type") in ("multi", "policy"):
                raise spec.error(f"graders.{key}", "cannot be a multi or policy check")
            graders.append((key, builder({"name": key, **sub}, spec.where)))
        text = spec.str_("calculate_output")
        try:
            formula = parse_formula(text, frozenset(raw))
        except FormulaError as exc:
            raise spec.error("calculate_output", str(exc)) from None
        threshold = spec.number("pass_threshold", 1.0)
        return cls(spec.name, "multi", spec.digest(), tuple(graders), formula, text, threshold)

    @property
    def needs_judge(self) -> bool:
        return any(check.needs_judge for _, check in self.graders)

    @property
    def templates(self) -> tuple[Template, ...]:
        """The sub-checks' templates: what ``validate-tasks`` mutates to prove the connection."""
        found: tuple[Template, ...] = ()
        for _, check in self.graders:
            found += getattr(check, "templates", ())
        return found

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        return self._combine([(k, c.run(sample, item, context)) for k, c in self.graders])

    async def arun(
        self,
        sample: Sample,
        item: Mapping[str, Any],
        context: CheckContext,
        judge: Judge | None,
    ) -> CheckResult:
        results = [(k, await c.arun(sample, item, context, judge)) for k, c in self.graders]
        return self._combine(results)

    def _combine(self, results: list[tuple[str, CheckResult]]) -> CheckResult:
        sub = {key: result.reward for key, result in results}
        details = {"graders": {key: result.to_dict() for key, result in results}}
        broken = [key for key, value in sub.items() if value is None]
        if broken:
            reason = f"sub-check {broken[0]!r} could not be graded"
            return self.result(None, reason, "sub_check_error", error=reason, details=details)
        values = {key: float(value) for key, value in sub.items() if value is not None}
        try:
            value = evaluate_formula(self.formula, values)
        except (ArithmeticError, FormulaError) as exc:
            reason = f"{self.formula_text}: {exc}"
            return self.result(None, reason, "formula_error", error=reason, details=details)
        if not math.isfinite(value):
            reason = f"{self.formula_text} is not finite"
            return self.result(None, reason, "formula_error", error=reason, details=details)
        passed = value >= self.threshold
        shown = ", ".join(f"{key}={v:g}" for key, v in values.items())
        reason = f"{self.formula_text} = {value:.4f} ({shown}) {'>=' if passed else '<'} " + (
            f"{self.threshold:g}"
        )
        return self.result(passed, reason, "formula", score=value, details=details)
