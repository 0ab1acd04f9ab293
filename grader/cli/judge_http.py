"""A stdlib :class:`~grader.checks.JudgeClient` for the offline commands.

``urllib`` blocks, so each request runs in a worker thread (``asyncio.to_thread``); the proxy
uses its own aiohttp client instead. The API key is read from the environment variable the
config names at the moment of each request, and never appears in an error message.
"""

from __future__ import annotations

import asyncio
import os
import urllib.error
import urllib.request
from typing import Any

from grader._json import JSONError, dumps, loads_exact
from grader.checks.judge import JudgeConfig
from grader.errors import GraderError

_MAX_REPLY_BYTES = 1 << 20


class JudgeHTTPError(GraderError, RuntimeError):
    """The judge endpoint could not be reached or answered with something unusable."""


class UrllibJudgeClient:
    """POST ``{endpoint}/chat/completions`` (OpenAI-compatible) and return the reply text."""

    def __init__(self, endpoint: str, api_key_env: str | None = None, timeout_s: float = 30.0):
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"judge endpoint must be an http(s) URL, got {endpoint!r}")
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, config: JudgeConfig) -> UrllibJudgeClient:
        if config.endpoint is None:
            raise ValueError("judge config needs an 'endpoint'")
        return cls(config.endpoint, config.api_key_env, config.timeout_s)

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        return await asyncio.to_thread(self._post, model, messages, temperature)

    def _post(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise JudgeHTTPError(f"environment variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        body = dumps({"model": model, "messages": messages, "temperature": temperature})
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read(_MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise JudgeHTTPError(f"judge endpoint answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise JudgeHTTPError(f"judge endpoint unreachable: {exc}") from None
        if len(raw) > _MAX_REPLY_BYTES:
            raise JudgeHTTPError("judge reply is larger than 1 MiB")
        return _content(raw)


def _content(raw: bytes) -> str:
    """``choices[0].message.content`` of a chat-completion body."""
    try:
        body: Any = loads_exact(raw.decode("utf-8"))
        content = body["choices"][0]["message"]["content"]
    except (JSONError, UnicodeDecodeError, KeyError, IndexError, TypeError):
        raise JudgeHTTPError("judge reply is not a chat completion") from None
    if not isinstance(content, str):
        raise JudgeHTTPError("judge reply has no text content")
    return content
