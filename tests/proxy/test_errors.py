"""One exception tree: every public exception ``proxy`` defines derives from ``ProxyError``, is
drawn in ``proxy/errors.py``'s docstring, and reaches a client through ``render`` alone."""

from __future__ import annotations

import re

import orjson
import pytest
from aiohttp import web

import proxy
import proxy.errors
from proxy.config import ConfigError
from proxy.errors import (
    UPSTREAM_KIND_OF,
    BadRequestError,
    DrainingError,
    ProxyError,
    UpstreamError,
    render,
)
from proxy.pipeline.record.results import ResultsWriteError
from tests.support.exceptions import defined_exceptions

# every module, the demo backend's too: one root for the whole package
EXCEPTIONS = defined_exceptions(proxy, lambda name: False)


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_proxy_exception_derives_from_the_root(name: str) -> None:
    assert issubclass(EXCEPTIONS[name], ProxyError)


def test_the_drawn_tree_is_the_defined_tree() -> None:
    doc = proxy.errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", doc)) | {"ProxyError"}
    assert drawn == set(EXCEPTIONS)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        pytest.param(ConfigError("upstream.url: must be set"), ValueError, id="config-is-value"),
        pytest.param(
            ResultsWriteError(3, OSError(28, "No space left on device")), OSError, id="write-is-os"
        ),
    ],
)
def test_builtin_bases_callers_catch_are_kept(error: ProxyError, builtin: type) -> None:
    assert isinstance(error, builtin)
    assert error.message in str(error)


def test_results_write_error_keeps_its_errno() -> None:
    error = ResultsWriteError(2, OSError(28, "No space left on device"))
    assert (error.errno, error.rows) == (28, 2)
    assert error.message == "2 row(s) not written: No space left on device"


def test_every_upstream_failure_code_names_its_metric_kind() -> None:
    codes = {cls.code: cls.kind for cls in UpstreamError.__subclasses__()}
    assert codes == UPSTREAM_KIND_OF
    assert set(UPSTREAM_KIND_OF.values()) == {"connect", "timeout", "protocol"}


def _error_body(response: web.Response) -> dict[str, object]:
    assert isinstance(response.body, bytes)
    error: dict[str, object] = orjson.loads(response.body)["error"]
    return error


@pytest.mark.parametrize(
    ("error", "limit", "status", "code", "message", "header"),
    [
        pytest.param(
            DrainingError("bye", retry_after_s=7),
            None,
            503,
            "server_draining",
            "bye",
            ("Retry-After", "7"),
            id="proxy-error-with-its-headers",
        ),
        pytest.param(
            BadRequestError("nope", param="items[0]", code="invalid_type"),
            None,
            400,
            "invalid_type",
            "nope",
            ("x-should-retry", "false"),
            id="scoring-error-with-its-code",
        ),
        pytest.param(
            web.HTTPRequestEntityTooLarge(max_size=10, actual_size=20),
            10,
            413,
            "request_too_large",
            "request body is larger than the limit of 10 bytes (",
            ("x-request-id", "rid-1"),
            id="body-over-the-configured-limit",
        ),
        pytest.param(
            web.HTTPRequestEntityTooLarge(max_size=10, actual_size=20),
            None,
            413,
            "request_too_large",
            "request body is too large (",
            ("x-request-id", "rid-1"),
            id="body-too-large-on-a-bare-app",
        ),
        pytest.param(
            web.HTTPMethodNotAllowed("PUT", ["POST"]),
            None,
            405,
            "proxy_error",
            "Method Not Allowed",
            ("x-should-retry", "false"),
            id="aiohttp-error-in-openai-shape",
        ),
    ],
)
def test_render_answers_in_openai_shape(
    error: ProxyError | web.HTTPException,
    limit: int | None,
    status: int,
    code: str,
    message: str,
    header: tuple[str, str],
) -> None:
    response = render(error, "rid-1", limit)
    assert response is not None
    assert response.status == status
    body = _error_body(response)
    assert body["code"] == code
    assert str(body["message"]).startswith(message)
    assert response.headers[header[0]] == header[1]


def test_render_leaves_a_redirect_to_aiohttp() -> None:
    assert render(web.HTTPFound("/elsewhere"), "rid-1", None) is None
