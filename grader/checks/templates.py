"""OpenAI grader templates: ``{{ sample.output_text }}``, ``{{ item.reference_answer }}``.

A template is literal text with ``{{ namespace.path }}`` substitutions (whitespace inside the
braces is allowed). Namespaces:

* ``sample`` — the model's answer: ``output_text``, ``output_json.<path>``,
  ``output_tools[i].function.name`` / ``.arguments.<path>``;
* ``item`` — the dataset row (the task's ``item`` object, ``prompt`` included).

Paths step through objects with ``.key`` (or ``["key"]``) and arrays with ``[i]``. A step into a
*string* that holds a JSON object or array reads the parsed JSON, because tool-call arguments
travel as JSON strings. Rendering never guesses: a path that is missing, or a value that is
JSON ``null`` (seed 003's "None"/"null" reference trap), raises :class:`TemplateError`, and which
side missed decides what it means (:func:`unresolved`):

* a ``sample.*`` path that does not resolve is the *model's* failure (``fail``,
  ``sample_value_missing``): a prose answer has no ``output_tools[0]``, a call without the
  argument has no ``arguments.queue``;
* an ``item.*`` path that does not resolve is *infrastructure* (``error``,
  ``template_unresolved``): the dataset row is missing a field (seed 003: "a missing dataset
  field can surface as a template or variable problem rather than a model-quality problem");
* a path that can never resolve on any answer (``sample.output_tool``,
  ``output_tools[0].arguments`` without ``.function``) is refused when the check is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from grader.checks._base import CheckDefinitionError
from grader.checks.sample import Sample
from grader.errors import GraderError
from grader.json import JSONError, dumps, loads_exact
from grader.toolcall.canon import TooDeepError, canonical_json

if TYPE_CHECKING:
    from grader.checks._base import BaseCheck, CheckResult

_SUBSTITUTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_HEAD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")
_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_\-]*)|\[([0-9]+)\]|\["((?:[^"\\]|\\.)*)"\]')
SAMPLE_FIELDS = ("output_text", "output_json", "output_tools")

Step = str | int


Side = Literal["sample", "item"]
# After output_tools[i]: the wire shape of one call; after .function: its name or arguments.
_TOOL_KEYS = ("type", "id", "function")
_FUNCTION_KEYS = ("name", "arguments")


class TemplateError(GraderError, LookupError):
    """A template did not resolve against this sample and item; ``side`` says which missed."""

    def __init__(self, message: str, side: Side = "item") -> None:
        super().__init__(message)
        self.side: Side = side


def unresolved(check: BaseCheck, exc: TemplateError) -> CheckResult:
    """The column for a template that did not resolve (module docstring: sample vs item)."""
    if exc.side == "sample":
        return check.result(False, f"the answer has no value there: {exc}", "sample_value_missing")
    return check.result(None, str(exc), "template_unresolved", error=str(exc))


def _check_sample_path(steps: tuple[Step, ...], text: str, where: str) -> None:
    """Refuse a ``sample.output_tools`` path no answer can ever resolve."""
    if steps[0] != "output_tools" or len(steps) < 2:
        return
    problem = None
    if not isinstance(steps[1], int):
        problem = "output_tools is a list: index it first, e.g. output_tools[0]"
    elif len(steps) > 2 and steps[2] not in _TOOL_KEYS:
        problem = f"a tool call has {', '.join(_TOOL_KEYS)}, not {steps[2]!r}"
    elif len(steps) > 3 and steps[2] != "function":
        problem = f"output_tools[i].{steps[2]} is a string: it has no {steps[3]!r}"
    elif len(steps) > 3 and steps[3] not in _FUNCTION_KEYS:
        problem = f"a function has {', '.join(_FUNCTION_KEYS)}, not {steps[3]!r}"
    elif len(steps) > 4 and steps[3] == "name":
        problem = "function.name is a string: it has no fields"
    if problem is not None:
        raise CheckDefinitionError(
            f"{where}: template '{{{{{text}}}}}' can never resolve: {problem}"
        )


@dataclass(frozen=True, slots=True)
class Ref:
    """One ``{{ namespace.path }}`` reference."""

    namespace: str
    steps: tuple[Step, ...]
    text: str  # as written, for messages


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal parts and references, in order."""

    source: str
    parts: tuple[str | Ref, ...]

    @property
    def refs(self) -> tuple[Ref, ...]:
        return tuple(part for part in self.parts if isinstance(part, Ref))

    @property
    def namespaces(self) -> frozenset[str]:
        return frozenset(ref.namespace for ref in self.refs)

    def render(self, sample: Sample, item: Mapping[str, Any]) -> str:
        """The resolved text; raise :class:`TemplateError` when any reference does not resolve."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = resolve(part, sample, item)
            try:
                out.append(render_value(value))
            except TemplateError as exc:
                side: Side = "sample" if part.namespace == "sample" else "item"
                raise TemplateError(str(exc), side) from None
        return "".join(out)


def parse_ref(expression: str, where: str) -> Ref:
    """Parse the inside of ``{{ ... }}``; raise :class:`CheckDefinitionError` if malformed."""
    text = expression.strip()
    head = _HEAD.match(expression)
    if head is None:
        raise CheckDefinitionError(f"{where}: template '{{{{{text}}}}}' names no namespace")
    namespace = head.group(1)
    steps: list[Step] = []
    pos = head.end()
    end = len(expression.rstrip())
    while pos < end:
        m = _STEP.match(expression, pos)
        if m is None:
            raise CheckDefinitionError(
                f"{where}: template '{{{{{text}}}}}': malformed path at {expression[pos:end]!r}"
            )
        key, index, quoted = m.groups()
        if index is not None:
            steps.append(int(index))
        else:
            steps.append(key if key is not None else loads_exact(f'"{quoted}"'))
        pos = m.end()
    if namespace == "sample":
        if not steps or steps[0] not in SAMPLE_FIELDS:
            raise CheckDefinitionError(
                f"{where}: template '{{{{{text}}}}}' must read one of "
                + ", ".join(f"sample.{f}" for f in SAMPLE_FIELDS)
            )
        if steps[0] == "output_text" and len(steps) > 1:
            raise CheckDefinitionError(
                f"{where}: template '{{{{{text}}}}}': sample.output_text is a string"
            )
        _check_sample_path(tuple(steps), text, where)
    elif namespace == "item":
        if not steps:
            raise CheckDefinitionError(f"{where}: template '{{{{{text}}}}}' needs an item field")
    else:
        raise CheckDefinitionError(
            f"{where}: template '{{{{{text}}}}}': unknown namespace {namespace!r} "
            "(use 'sample' or 'item')"
        )
    return Ref(namespace, tuple(steps), text)


def parse_template(source: str, where: str) -> Template:
    """Parse a template string; text without ``{{ }}`` is one literal part."""
    parts: list[str | Ref] = []
    pos = 0
    for m in _SUBSTITUTION.finditer(source):
        if m.start() > pos:
            parts.append(source[pos : m.start()])
        parts.append(parse_ref(m.group(1), where))
        pos = m.end()
    if pos < len(source):
        parts.append(source[pos:])
    return Template(source, tuple(parts))


def sample_root(sample: Sample) -> dict[str, Any]:
    """The ``sample`` namespace as plain data."""
    return {
        "output_text": sample.output_text,
        "output_json": sample.output_json,
        "output_tools": sample.output_tools,
    }


def _step_into(value: Any, step: Step) -> Any:
    """One path step; a JSON string is parsed first. Raise KeyError when the step misses."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            value = loads_exact(value)
        except JSONError:
            raise KeyError(step) from None
    if isinstance(step, int):
        if isinstance(value, list) and step < len(value):
            return value[step]
        raise KeyError(step)
    if isinstance(value, Mapping) and step in value:
        return value[step]
    raise KeyError(step)


def resolve(ref: Ref, sample: Sample, item: Mapping[str, Any]) -> Any:
    """The value a reference names; raise :class:`TemplateError` when there is none."""
    side: Side = "sample" if ref.namespace == "sample" else "item"
    value: Any = sample_root(sample) if side == "sample" else item
    if side == "sample" and ref.steps[0] == "output_json" and sample.output_json is None:
        raise TemplateError(f"{{{{{ref.text}}}}} did not resolve (the answer is not JSON)", side)
    for step in ref.steps:
        try:
            value = _step_into(value, step)
        except KeyError:
            raise TemplateError(f"{{{{{ref.text}}}}} did not resolve (no {step!r})", side) from None
    if value is None:
        raise TemplateError(f"{{{{{ref.text}}}}} resolved to null", side)
    return value


def render_value(value: Any) -> str:
    """Strings are substituted as they are; any other JSON value as canonical JSON text."""
    if isinstance(value, str):
        return value
    try:
        return canonical_json(value)
    except (TypeError, TooDeepError) as exc:
        raise TemplateError(f"value cannot be rendered as text: {exc}") from None


def with_value(sample: Sample, ref: Ref, new: Any) -> Sample | None:
    """A copy of ``sample`` with the value at ``ref`` replaced (arguments stay JSON strings).

    Used by ``validate-tasks`` to mutate exactly the value a check reads; None when the
    sample has no value there to replace.
    """
    if ref.namespace != "sample":
        return None
    root = _copy(sample_root(sample))
    try:
        replaced = _set(root, ref.steps, new)
    except KeyError:
        return None
    return Sample(replaced["output_text"], replaced["output_json"], replaced["output_tools"])


def _set(value: Any, steps: tuple[Step, ...], new: Any) -> Any:
    if not steps:
        return new
    step, rest = steps[0], steps[1:]
    if isinstance(value, str):
        try:
            parsed = loads_exact(value)
        except JSONError:
            raise KeyError(step) from None
        return dumps(_set(parsed, steps, new)).decode()
    if isinstance(step, int) and isinstance(value, list) and step < len(value):
        value[step] = _set(value[step], rest, new)
        return value
    if isinstance(step, str) and isinstance(value, dict) and step in value:
        value[step] = _set(value[step], rest, new)
        return value
    raise KeyError(step)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
