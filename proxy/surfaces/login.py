"""The live page behind inbound keys: ``/ui`` shows a login form, ``POST /ui/login`` sets the
session cookie (proxy/uisession.py), ``POST /ui/logout`` clears it; and ``/favicon.ico``.

A browser cannot send ``X-Gradeproxy-Key``, so with ``auth.keys_env`` set the page itself is
served only to a request with a valid key or session, and everyone else gets the form. The form
posts the key once; the cookie it gets back is an HMAC of the key, never the key, and opens only
the page's JSON (the guard, proxy/pipeline/guard.py, decides). Without keys the page is served
as before and the form never appears.

Never reads or writes anything but the request and its response.
"""

from __future__ import annotations

import html

from aiohttp import web

from proxy.pipeline.guard import Guard
from proxy.uisession import COOKIE, COOKIE_PATH, MAX_AGE_S

# A gauge needle on a dark disc: small, and no binary file to ship.
FAVICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    b'<circle cx="16" cy="16" r="15" fill="#1f2937"/>'
    b'<path d="M7 21a9 9 0 1 1 18 0" fill="none" stroke="#22c55e" stroke-width="3"/>'
    b'<path d="M16 21l6-8" stroke="#f9fafb" stroke-width="2.5" stroke-linecap="round"/></svg>'
)

_FORM = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<title>gradeproxy: log in</title>
<style>body{{font-family:system-ui,sans-serif;margin:0;padding:2rem 1rem;background:#f6f7f9}}
main{{max-width:24rem;margin:auto;background:#fff;padding:1.5rem;border-radius:8px;
box-shadow:0 1px 3px #0002}}label,input,button{{display:block;width:100%;box-sizing:border-box}}
input{{padding:.6rem;margin:.4rem 0 1rem;font-size:1rem}}button{{padding:.6rem;font-size:1rem}}
.error{{color:#b91c1c}}</style></head><body><main><h1>gradeproxy</h1>
<p>This proxy needs an inbound key (<code>auth.keys_env</code>) to show its live page.</p>
{error}<form method="post" action="/ui/login"><label for="key">Key</label>
<input id="key" name="key" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button></form></main></body></html>
"""


def login_form(error: str = "") -> bytes:
    shown = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    return _FORM.format(error=shown).encode()


def signed_in(request: web.Request, guard: Guard) -> bool:
    """A key header or a valid session cookie (only asked when keys are set)."""
    return guard.has_valid_key(request) or guard.sessions.valid(request.cookies.get(COOKIE))


def add_login_routes(target: web.Application, guard: Guard | None, page: bytes) -> None:
    """``/ui`` (the page, or the form when keys are set and the request has neither a key nor
    a session), the login and logout posts, and the icon."""
    keyed = guard is not None and guard.keyed

    async def ui(request: web.Request) -> web.Response:
        if keyed and guard is not None and not signed_in(request, guard):
            return _html(login_form())
        return _html(page)

    async def login(request: web.Request) -> web.Response:
        form = await request.post()
        given = form.get("key")
        if guard is None or not isinstance(given, str) or not guard.key_is_valid(given.strip()):
            return _html(login_form("That key is not valid."), status=401)
        response = web.HTTPSeeOther("/ui")
        response.set_cookie(
            COOKIE,
            guard.sessions.issue(given.strip()),
            max_age=MAX_AGE_S,
            path=COOKIE_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        raise response

    async def logout(request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/ui")
        response.del_cookie(COOKIE, path=COOKIE_PATH)
        raise response

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(
            body=FAVICON,
            content_type="image/svg+xml",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    target.router.add_get("/ui", ui)
    target.router.add_post("/ui/login", login)
    target.router.add_post("/ui/logout", logout)
    target.router.add_get("/favicon.ico", favicon)


def _html(body: bytes, status: int = 200) -> web.Response:
    return web.Response(
        body=body,
        status=status,
        content_type="text/html",
        charset="utf-8",
        headers={"Cache-Control": "no-store"},
    )
