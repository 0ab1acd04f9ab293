"""The live page's login session: a signed, expiring cookie, so a browser can open ``/ui`` when
inbound keys (``auth.keys`` or ``auth.keys_env``) are set.

A browser cannot send the key header, so the page offers a form (``POST /ui/login``); a valid
key there gets a cookie ``<expiry>.<HMAC-SHA256(key, "gradeproxy-ui|<expiry>")>``: never the key
itself. Any process that knows the keys can check it, so every worker of ``listen.workers``
and a restarted proxy accept it, and removing a key (or changing its secret) ends its sessions.
A cookie resolves to the key it was issued for (:meth:`Sessions.key_of`), so the page's JSON
knows the key id a session acts for, as a request with the key itself would.
The cookie is ``HttpOnly`` and ``SameSite=Strict``, scoped to ``Path=/ui`` (``Secure`` when the
request came over TLS), and it opens only the page's own JSON (``/ui/scoreboard.json``,
``/ui/failures.json``, the review queue's ``/ui/review/items.json`` and its label post): the
API, ``/metrics`` and the workers' ``/ui/worker.json`` still take
only the key header (proxy/pipeline/guard.py).

Holds no state and does no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Final, Generic, Protocol, TypeVar


class Secret(Protocol):
    """What a session needs of an inbound key (proxy/config/keys.py's InboundKey)."""

    @property
    def secret(self) -> bytes: ...


Key = TypeVar("Key", bound=Secret)

COOKIE: Final = "gradeproxy_ui"
COOKIE_PATH: Final = "/ui"
MAX_AGE_S: Final = 12 * 3600
# The page's JSON, which a session opens; the page itself and its login form are open to all.
SESSION_PATHS: Final = frozenset(
    {
        "/ui/scoreboard.json",
        "/ui/failures.json",
        "/ui/logout",
        "/ui/review/items.json",  # the review queue (proxy/surfaces/review.py)
        "/ui/review/label",
    }
)
_LABEL: Final = b"gradeproxy-ui|"


class Sessions(Generic[Key]):
    """Issues and checks the page's session cookie against the configured inbound keys."""

    def __init__(self, keys: tuple[Key, ...], clock: Callable[[], float] = time.time) -> None:
        self._keys = keys
        self._clock = clock

    @staticmethod
    def _sign(key: bytes, expiry: str) -> str:
        return hmac.new(key, _LABEL + expiry.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self, key: str) -> str:
        """A cookie value for ``key`` (which the caller has checked is a configured key)."""
        expiry = str(int(self._clock()) + MAX_AGE_S)
        return f"{expiry}.{self._sign(key.encode('utf-8'), expiry)}"

    def valid(self, value: str | None) -> bool:
        """Whether ``value`` is an unexpired cookie signed with one of the keys."""
        return self.key_of(value) is not None

    def key_of(self, value: str | None) -> Key | None:
        """The key an unexpired cookie was signed with (its ``id`` is the session's key id),
        or None; every key is tried, so timing says nothing about which."""
        if not value or not self._keys:
            return None
        expiry, _, signature = value.partition(".")
        if not expiry.isascii() or not expiry.isdigit() or int(expiry) <= self._clock():
            return None
        if int(expiry) > self._clock() + MAX_AGE_S:
            return None  # signed for longer than this proxy issues: not one of ours
        found: Key | None = None
        given = signature.encode()
        for key in self._keys:
            if hmac.compare_digest(given, self._sign(key.secret, expiry).encode()):
                found = key
        return found
