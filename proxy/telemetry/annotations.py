"""Evaluation results as Arize Phoenix span annotations (``tracing.phoenix_url``).

Phoenix stores what arrives over OTLP as spans and span events; its own evaluation surfaces
(the annotation columns of its span tables, their filters, the feedback panel) read
*annotations*, which it takes only through its REST API (``POST /v1/span_annotations``, checked
on arize-phoenix 20.26). So with ``tracing.phoenix_url`` set, the export thread also writes each
``gen_ai.evaluation.result`` of a request as an annotation of the call span it evaluates, once
that span was exported (Phoenix attaches an annotation to a span it holds). The span events stay:
every other backend reads those.

One annotation per check column: ``name`` the column's, ``result`` its label (``pass`` …),
score and explanation, ``annotator_kind`` ``CODE``, and an ``identifier`` per choice (or
episode), so ``n`` > 1 answers on one span stay apart and a resent batch updates rather than
duplicates. ``PHOENIX_API_KEY``, when set, is sent as a bearer token, as Phoenix's own clients do.
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from grader.json import well_formed
from proxy.telemetry import semconv
from proxy.telemetry.record import SpanRecord

__all__ = ["PhoenixAnnotations", "span_annotations"]

PATH = "v1/span_annotations"


def span_annotations(record: SpanRecord, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The annotations of a request's graded rows, on its call span (the evaluated one)."""
    span_id = f"{record.upstream_span_id:016x}"
    out: list[dict[str, Any]] = []
    for attributes in semconv.evaluations(rows, None):
        episode = attributes.get("gradeproxy.episode")
        choice = attributes.get("gradeproxy.choice")
        which = f"episode:{episode}" if episode is not None else f"choice:{choice}"
        metadata = {"source": "gradeproxy", "task_id": record.task_id, "choice": choice}
        if attributes.get("gradeproxy.advisory"):
            metadata["advisory"] = True
        result = {
            "label": attributes.get("gen_ai.evaluation.score.label"),
            "score": attributes.get("gen_ai.evaluation.score.value"),
            "explanation": attributes.get("gen_ai.evaluation.explanation"),
        }
        out.append(
            {
                "span_id": span_id,
                "name": attributes["gen_ai.evaluation.name"],
                "annotator_kind": "CODE",
                "result": {key: value for key, value in result.items() if value is not None},
                "metadata": {key: value for key, value in metadata.items() if value is not None},
                "identifier": f"gradeproxy:{which}",
            }
        )
    return out


class PhoenixAnnotations:
    """Posts annotations to one Phoenix (blocking: the export thread's, never the loop's)."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.url = f"{base_url.rstrip('/')}/{PATH}"
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/json"}
        key = os.environ.get("PHOENIX_API_KEY")
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def send(self, batch: list[dict[str, Any]]) -> bool:
        """One request for ``batch``; False when Phoenix refused it or could not be reached."""
        try:
            body = _json({"data": batch})
        except TypeError:  # what no JSON can hold (an integer past 64 bits): that batch only
            return False
        try:  # the request too: a URL that passed the settings' check can still be one
            # urllib cannot parse ("http://[::1", ValueError), never the thread's end
            request = urllib.request.Request(self.url, body, self.headers, method="POST")
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return 200 <= int(response.status) < 300
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
            return False  # a malformed answer (BadStatusLine) too: never the thread's end


def _json(document: dict[str, Any]) -> bytes:
    """``document`` as JSON. A lone surrogate (an answer the stdlib's parser read, quoted in an
    explanation) is not UTF-8, and orjson refuses it: each is written as U+FFFD for Phoenix,
    never an exception that would end the export thread."""
    try:
        return orjson.dumps(document)
    except TypeError:
        return orjson.dumps(_replaced(document))


def _replaced(value: Any) -> Any:
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, dict):
        return {_replaced(key): _replaced(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item) for item in value]
    return value
