"""The demo backend's side of OpenAI's request contract: parsing, validation and error bodies.

A client pointed at the demo must meet the errors a real server sends (a 400 naming the
``param``, a 404 for an unknown route, a simulated 429/5xx on request), so the proxy's
pass-through of upstream errors is exercised by the demo as well as by the tests. Split from
``proxy/demo/backend.py``, which plans and sends the answers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.demo.answers import MAX_CHOICES
from proxy.errors import ProxyError

_ALLOWED_ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_SIMULATED_ERROR_MODEL: Final = re.compile(r"error-([45]\d\d)")

log = logging.getLogger("proxy.demo.backend")


class ApiError(ProxyError):
    """Raised anywhere in a demo backend handler to answer with OpenAI's error body (as a model
    server would: a status, a ``type`` and ``code`` of its own) instead of a traceback.

    Under the proxy's one root (``proxy/errors.py``), but answered by the demo backend alone
    (:func:`error_response`): the proxy passes an upstream's errors through, it never renders
    these. Its status, type and code are per instance, so they are not the root's class values.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.http_status = status
        self.param = param
        self.error_code = code
        self.kind = kind or ("server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict[str, dict[str, str | None]]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.error_code,
            }
        }


def error_response(error: ApiError) -> web.Response:
    return web.Response(
        status=error.http_status, body=orjson.dumps(error.body()), content_type="application/json"
    )


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 404:
            message = f"Invalid URL ({request.method} {request.path})"
        elif exc.status == 405:
            message = f"Method {request.method} is not allowed on {request.path}"
        else:
            message = exc.reason
        return error_response(ApiError(exc.status, message))
    except Exception:
        log.exception("demo backend failed on %s %s", request.method, request.path)
        return error_response(
            ApiError(500, "The server had an error while processing your request.")
        )


def text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


def last_user_turn(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, bool]:
    """The last user message's text, and whether a tool result already answers it."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            followed = any(m.get("role") in ("tool", "function") for m in messages[i + 1 :])
            return text_of(messages[i].get("content")), followed
    return None, False


@dataclass(frozen=True, slots=True)
class DemoRequest:
    model: str
    messages: list[dict[str, Any]]
    n: int
    stream: bool
    include_usage: bool


def json_body(raw: bytes) -> tuple[dict[str, Any], str]:
    """The request body as an object and its ``model``; :class:`ApiError` (OpenAI's 400 body)
    for a body that is not JSON, not an object, or names no model. Chat and Responses alike."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(
            400,
            "We could not parse the JSON body of your request. The OpenAI API expects a "
            "JSON payload.",
        ) from exc
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "you must provide a model parameter", param="model")
    return body, model


def parse_request(raw: bytes) -> DemoRequest:
    body, model = json_body(raw)
    messages = body.get("messages")
    if messages is None:
        raise ApiError(
            400,
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not isinstance(messages, list):
        raise ApiError(
            400,
            "Invalid type for 'messages': expected an array.",
            param="messages",
            code="invalid_type",
        )
    if not messages:
        raise ApiError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            param="messages",
            code="empty_array",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ALLOWED_ROLES:
            raise ApiError(
                400,
                f"Invalid value for 'messages[{i}].role': expected one of "
                + ", ".join(sorted(_ALLOWED_ROLES))
                + ".",
                param=f"messages[{i}].role",
                code="invalid_value",
            )
    n = body.get("n")
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
        raise ApiError(
            400,
            f"Invalid 'n': expected an integer between 1 and {MAX_CHOICES}.",
            param="n",
            code="invalid_value",
        )
    stream = body.get("stream")
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise ApiError(
            400,
            "Invalid type for 'stream': expected a boolean.",
            param="stream",
            code="invalid_type",
        )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(
            400,
            "Invalid type for 'stream_options': expected an object.",
            param="stream_options",
            code="invalid_type",
        )
    include_usage = bool(stream and options and options.get("include_usage") is True)
    return DemoRequest(model, messages, n, stream, include_usage)


def simulated_error(model: str) -> ApiError | None:
    # A documented escape hatch so demos and tests can exercise upstream-error handling.
    matched = _SIMULATED_ERROR_MODEL.fullmatch(model)
    if matched is None:
        return None
    status = int(matched.group(1))
    if status == 429:
        return ApiError(
            429,
            "Rate limit reached for demo requests.",
            code="rate_limit_exceeded",
            kind="requests",
        )
    if status == 401:
        return ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
    return ApiError(status, f"Simulated upstream failure ({status}).")
