"""Where a config field is in its YAML file, so a config error names ``file:line``.

Errors are raised with the field's dotted name (``routes[1].shadow.sample_rate: …``); this finds
that field's line in the file's node tree, so ``serve`` can say
``proxy.yaml:14: routes[1].shadow.sample_rate: must be within 0..1`` in one line.
"""

from __future__ import annotations

import re

import yaml

__all__ = ["field_line", "yaml_error_line"]

_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def field_line(text: str, dotted: str) -> int | None:
    """The 1-based line of ``dotted`` (``section.field``, ``routes[0].url``) in ``text``."""
    try:
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line: int | None = None
    for index, name in _PART.findall(dotted):
        if isinstance(node, yaml.SequenceNode) and index and int(index) < len(node.value):
            node = node.value[int(index)]
            line = node.start_mark.line + 1
        elif isinstance(node, yaml.MappingNode) and name:
            found = next(((k, v) for k, v in node.value if k.value == name), None)
            if found is None:
                return line
            line, node = found[0].start_mark.line + 1, found[1]
        else:
            return line
    return line


def yaml_error_line(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """A YAML syntax error as (line, one-line problem)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    line = mark.line + 1 if mark is not None else None
    return line, " ".join(str(problem).split())
