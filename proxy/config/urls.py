"""The rule for every OpenAI-compatible base URL in the config (``upstream.url``,
``routes[].url``, ``*.shadow.url``, ``judge.endpoint``).

A bare host (``http://backend:8000``) is an error: the client's path is appended to the base,
so every request would go to ``/chat/completions`` and be a 404 — the mistake the docs once
made. A path that does not end in ``/v1`` is only a warning, because some providers' bases
really are elsewhere (``.../v1beta/openai/``); ``allow_non_v1_path: true`` beside the URL says
it is meant. Credentials, a query or a fragment in a base URL are errors: no request would
carry them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from proxy.config.coerce import ConfigError

if TYPE_CHECKING:
    from proxy.config.model import Config


def check_base_url(where: str, value: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` for a URL that cannot be a base URL."""
    url = urlsplit(value)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise ConfigError(
            f"{where}: must be an http(s) URL such as http://127.0.0.1:8000/v1, got {value!r}"
        )
    try:
        url.port  # noqa: B018 (it raises for a port out of range or not a number)
    except ValueError:
        raise ConfigError(f"{where}: {value!r} has no valid port") from None
    # The relay's client sends none of these (proxy/pipeline/upstream/): refused, never dropped.
    if url.username is not None or url.password is not None:
        raise ConfigError(
            f"{where}: credentials in the URL are never sent; put the key in api_key_env"
        )
    if url.query or url.fragment:
        raise ConfigError(f"{where}: {value!r} has a query or fragment; a base URL has neither")
    if url.path.strip("/") == "":
        # The documented mistake: every request would go to <host>/chat/completions, a 404.
        raise ConfigError(
            f"{where}: {value!r} has no path; an OpenAI-compatible base URL ends in /v1 "
            f"(try {value.rstrip('/')}/v1)"
        )


def url_warnings(config: Config) -> list[str]:
    """Base URLs whose path does not end in ``/v1``: legal (``.../v1beta/openai/``), but usually
    a typo; each block's ``allow_non_v1_path: true`` says it is meant and silences the warning."""
    blocks: list[tuple[str, str, bool]] = [
        ("upstream.url", config.upstream.url, config.upstream.allow_non_v1_path)
    ]
    shadows = [("upstream.shadow", config.upstream.shadow)]
    for number, route in enumerate(config.routes):
        blocks.append((f"routes[{number}].url", route.url, route.allow_non_v1_path))
        shadows.append((f"routes[{number}].shadow", route.shadow))
    blocks += [(f"{w}.url", s.url, s.allow_non_v1_path) for w, s in shadows if s is not None]
    if config.judge.endpoint is not None:
        blocks.append(("judge.endpoint", config.judge.endpoint, config.judge.allow_non_v1_path))
    return [
        f"{where}: {url!r} does not end in /v1; if the provider's base URL really is "
        f"elsewhere, set allow_non_v1_path: true beside it"
        for where, url, allowed in blocks
        if not allowed and not urlsplit(url).path.rstrip("/").endswith("/v1")
    ]
