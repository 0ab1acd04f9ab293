"""Token usage as a backend reported it, read once for rows, metrics and trace spans.

Chat completions report ``prompt_tokens`` / ``completion_tokens`` with
``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens``; the
Responses API reports ``input_tokens`` / ``output_tokens`` with ``input_tokens_details`` and
``output_tokens_details``. :func:`token_usage` reads either into one shape, the row's ``usage``
field (docs/rows.md). It never guesses: a count the backend did not send is ``None``, never 0,
and a value that is not a non-negative integer is treated as not sent.

Pure: no I/O, so the proxy, its grading process and the telemetry exporter all call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["TOKEN_TYPES", "token_usage"]

# The row's keys (and the ``type`` label of gradeproxy_tokens_total without the suffix), with
# the chat completions name and the Responses API name of each, and the details object it is in.
_READ: Final[tuple[tuple[str, str | None, str, str], ...]] = (
    ("input_tokens", None, "prompt_tokens", "input_tokens"),
    ("output_tokens", None, "completion_tokens", "output_tokens"),
    ("cached_input_tokens", "input", "cached_tokens", "cached_tokens"),
    ("reasoning_tokens", "output", "reasoning_tokens", "reasoning_tokens"),
)
_DETAILS: Final = {
    "input": ("prompt_tokens_details", "input_tokens_details"),
    "output": ("completion_tokens_details", "output_tokens_details"),
}
# The row key of each metric ``type`` (cached_input is part of input, reasoning of output).
TOKEN_TYPES: Final[tuple[tuple[str, str], ...]] = (
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("cached_input", "cached_input_tokens"),
    ("reasoning", "reasoning_tokens"),
)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _first(source: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        found = _count(source.get(name))
        if found is not None:
            return found
    return None


def token_usage(usage: Any) -> dict[str, int | None] | None:
    """The reported ``usage`` object (chat or Responses) as ``{input_tokens, output_tokens,
    cached_input_tokens, reasoning_tokens}``, each None where not reported; None when there is
    no usage object or it holds no count at all."""
    if not isinstance(usage, Mapping):
        return None
    out: dict[str, int | None] = {}
    for key, details, chat_name, responses_name in _READ:
        if details is None:
            out[key] = _first(usage, (chat_name, responses_name))
            continue
        value = None
        for container in _DETAILS[details]:
            inner = usage.get(container)
            if isinstance(inner, Mapping):
                value = _first(inner, (chat_name, responses_name))
                if value is not None:
                    break
        out[key] = value
    return out if any(v is not None for v in out.values()) else None
