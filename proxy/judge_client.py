"""The LLM judge's transport on the proxy: an OpenAI-compatible chat call over aiohttp.

The judge's rules (pinned model, temperature 0, binary verdicts, retries, the concurrency
limit) live in ``grader.checks.judge``; this is only the wire. Its key comes from the
environment variable the config names.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import orjson


class JudgeHTTPError(RuntimeError):
    """The judge endpoint answered with an error status or an unreadable body."""


class AiohttpJudgeClient:
    """``JudgeClient`` over a shared aiohttp session."""

    def __init__(
        self, session: aiohttp.ClientSession, endpoint: str, api_key_env: str | None
    ) -> None:
        self.session = session
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.api_key_env = api_key_env

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = orjson.dumps({"model": model, "messages": messages, "temperature": temperature})
        async with self.session.post(self.url, data=body, headers=headers) as response:
            raw = await response.read()
            if response.status >= 400:
                raise JudgeHTTPError(f"judge answered {response.status}: {raw[:200]!r}")
        try:
            payload: Any = orjson.loads(raw)
            content = payload["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise JudgeHTTPError(f"unreadable judge reply: {exc}") from None
        if not isinstance(content, str):
            raise JudgeHTTPError("the judge's reply has no text content")
        return content
