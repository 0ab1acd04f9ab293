"""The page's session cookie: an expiring HMAC of a configured key, never the key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.config.keys import InboundKey
from proxy.uisession import MAX_AGE_S, Sessions

NOW = 1_800_000_000.0


def _sessions(keys: tuple[str, ...] = ("k-one", "k-two"), now: float = NOW) -> Sessions[InboundKey]:
    return Sessions(tuple(InboundKey(None, key.encode()) for key in keys), clock=lambda: now)


@pytest.mark.parametrize(
    ("issued_with", "checked_keys", "checked_at", "valid"),
    [
        pytest.param("k-one", ("k-one", "k-two"), NOW, True, id="fresh"),
        pytest.param("k-two", ("k-one", "k-two"), NOW + MAX_AGE_S - 1, True, id="second_key"),
        pytest.param("k-one", ("k-one", "k-two"), NOW + MAX_AGE_S, False, id="expired"),
        pytest.param("k-one", ("k-two",), NOW, False, id="key_removed"),
        pytest.param("k-one", ("k-one-and-more",), NOW, False, id="another_key"),
        pytest.param("k-one", (), NOW, False, id="keys_switched_off"),
    ],
)
def test_a_cookie_is_valid_while_its_key_is_and_until_it_expires(
    issued_with: str, checked_keys: tuple[str, ...], checked_at: float, valid: bool
) -> None:
    cookie = _sessions(now=NOW).issue(issued_with)
    assert issued_with not in cookie
    assert _sessions(checked_keys, now=checked_at).valid(cookie) is valid


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param("", id="empty"),
        pytest.param("k-one", id="the_key_itself"),
        pytest.param(f"{int(NOW) + 60}.", id="no_signature"),
        pytest.param(f"{int(NOW) + 60}.{'0' * 64}", id="wrong_signature"),
        pytest.param("１２３.abc", id="non_ascii_digits"),
    ],
)
def test_anything_but_a_signed_cookie_is_refused(value: str | None) -> None:
    assert _sessions().valid(value) is False


def test_a_tampered_expiry_is_refused() -> None:
    expiry, _, signature = _sessions().issue("k-one").partition(".")
    assert _sessions().valid(f"{int(expiry) + 1}.{signature}") is False


def test_a_cookie_signed_for_longer_than_issued_is_refused() -> None:
    """A longer life than the proxy gives would be a forgery (or a clock far off)."""
    later = _sessions(now=NOW + 3600).issue("k-one")
    assert _sessions(now=NOW).valid(later) is False
    assert _sessions(now=NOW + 3600).valid(later) is True


@given(st.text())
def test_no_random_text_is_a_session(value: str) -> None:
    assert _sessions().valid(value) is False
