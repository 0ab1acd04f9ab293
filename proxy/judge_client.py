"""The LLM judge's one transport: an OpenAI-compatible chat call over aiohttp.

Used by the proxy (on a session it shares for the app's life) and by the offline commands
(``grade``, ``validate-tasks``, ``regrade``, ``replay`` with ``--judge``), which import it lazily
from ``gradeproxy.cli`` so the grader's pure core never sees aiohttp. Without a session it opens
one per request: an offline command runs each batch under its own ``asyncio.run``, and a
session outliving its loop is a leak.

The judge's rules (pinned model, temperature 0, binary verdicts, retries, the timeout, the
concurrency limit) live in ``grader.checks.judge``; this is only the wire. The API key is read
from the environment variable the config names at the moment of each request, and never
appears in an error message. A timeout is left to raise ``TimeoutError``, which the judge
reports as ``judge_timeout``; any other failure is a :class:`JudgeHTTPError` (``judge_error``).
"""

from __future__ import annotations

import os
from typing import Any, Final

import aiohttp

from grader.checks.judge import JudgeConfig
from grader.json import JSONError, dumps, loads_exact
from proxy.errors import ProxyError

MAX_REPLY_BYTES: Final = 1 << 20


class JudgeHTTPError(ProxyError, RuntimeError):
    """The judge endpoint could not be reached or answered with something unusable."""


class AiohttpJudgeClient:
    """``JudgeClient``: POST ``{endpoint}/chat/completions`` and return the reply's text."""

    def __init__(
        self,
        endpoint: str,
        api_key_env: str | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"judge endpoint must be an http(s) URL, got {endpoint!r}")
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.api_key_env = api_key_env
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    @classmethod
    def from_config(cls, config: JudgeConfig) -> AiohttpJudgeClient:
        """The offline commands' client: a session per request, the config's timeout."""
        if config.endpoint is None:
            raise ValueError("judge config needs an 'endpoint'")
        return cls(config.endpoint, config.api_key_env, timeout_s=config.timeout_s)

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise JudgeHTTPError(f"environment variable {self.api_key_env} is not set")
            headers["Authorization"] = f"Bearer {key}"
        body = dumps({"model": model, "messages": messages, "temperature": temperature})
        if self.session is not None:
            return await self._post(self.session, body, headers)
        async with aiohttp.ClientSession() as session:
            return await self._post(session, body, headers)

    async def _post(
        self, session: aiohttp.ClientSession, body: bytes, headers: dict[str, str]
    ) -> str:
        try:
            async with session.post(
                self.url, data=body, headers=headers, timeout=self.timeout
            ) as response:
                if response.status >= 400:
                    raise JudgeHTTPError(f"judge endpoint answered HTTP {response.status}")
                raw = bytearray()
                async for chunk in response.content.iter_any():
                    raw += chunk
                    if len(raw) > MAX_REPLY_BYTES:
                        raise JudgeHTTPError("judge reply is larger than 1 MiB")
        except TimeoutError:
            raise  # aiohttp's timeouts are ClientErrors too: this one is the judge's timeout
        except aiohttp.ClientError as exc:
            raise JudgeHTTPError(f"judge endpoint unreachable: {exc}") from None
        return _content(bytes(raw))


def _content(raw: bytes) -> str:
    """``choices[0].message.content`` of a chat-completion body (read exactly: no NaN)."""
    try:
        body: Any = loads_exact(raw.decode("utf-8"))
        content = body["choices"][0]["message"]["content"]
    except (JSONError, UnicodeDecodeError, KeyError, IndexError, TypeError):
        raise JudgeHTTPError("judge reply is not a chat completion") from None
    if not isinstance(content, str):
        raise JudgeHTTPError("judge reply has no text content")
    return content
