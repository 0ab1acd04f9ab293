"""A fake judge model: a chat completions endpoint that answers from a script."""

from __future__ import annotations

from typing import Any

from aiohttp import web


def judge_app(replies: list[str], seen: list[Any]) -> web.Application:
    """Each request body is appended to ``seen``; each answer is the next of ``replies``
    (``PASS`` once they run out)."""

    async def complete(request: web.Request) -> web.Response:
        seen.append(await request.json())
        content = replies.pop(0) if replies else "PASS"
        return web.json_response(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    return app
