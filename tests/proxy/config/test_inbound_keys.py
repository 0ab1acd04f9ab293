"""Named inbound keys (``auth.keys``) beside the unnamed ``auth.keys_env``: what is read, and the
clear error for every way a key can be unusable (proxy/config/keys.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, load_config
from proxy.config.keys import InboundKey

V1 = {"upstream": {"url": "http://127.0.0.1:8000/v1"}}


def _load(auth: dict[str, Any], folder: Path) -> tuple[InboundKey, ...]:
    """The keys of ``auth``, with ``{dir}`` in a ``secret_file`` path made ``folder``: the tables
    name the secrets folder before it exists, and stay as written (the dicts are copied)."""
    keys = [
        {**key, "secret_file": key["secret_file"].format(dir=folder)}
        if "secret_file" in key
        else key
        for key in auth.get("keys", [])
    ]
    section = {**auth, "keys": keys} if "keys" in auth else auth
    return load_config(None, {**V1, "auth": section}, environ={}).inbound_keys()


@pytest.fixture
def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TEAM_A_KEY", "sk-team-a")
    monkeypatch.setenv("EMPTY_KEY", "  ")
    monkeypatch.setenv("UNNAMED_KEYS", "k-old-1, k-old-2")
    monkeypatch.setenv("SAME_AS_A", "sk-team-a")
    (tmp_path / "team-b").write_text("sk-team-b\n", encoding="utf-8")
    (tmp_path / "blank").write_text("\n", encoding="utf-8")
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    return tmp_path


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        pytest.param({}, [], id="no_keys_no_auth"),
        pytest.param(
            {"keys": [{"id": "team-a", "secret_env": "TEAM_A_KEY"}]},
            [("team-a", b"sk-team-a", None, None)],
            id="named_from_env",
        ),
        pytest.param(
            {"keys": [{"id": "team-b", "secret_file": "{dir}/team-b", "rpm": 60, "tpm": 1000}]},
            [("team-b", b"sk-team-b", 60, 1000)],
            id="named_from_file_newline_dropped_with_limits",
        ),
        pytest.param(
            {
                "keys": [{"id": "team-a", "secret_env": "TEAM_A_KEY"}],
                "keys_env": "UNNAMED_KEYS",
            },
            [
                ("team-a", b"sk-team-a", None, None),
                (None, b"k-old-1", None, None),
                (None, b"k-old-2", None, None),
            ],
            id="named_and_unnamed_together",
        ),
        pytest.param(
            {"keys_env": "UNNAMED_KEYS"},
            [(None, b"k-old-1", None, None), (None, b"k-old-2", None, None)],
            id="keys_env_alone_still_accepted",
        ),
    ],
)
def test_keys_are_read_with_their_ids(
    secrets: Path, auth: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    keys = _load(auth, secrets)
    assert [(k.id, k.secret, k.rpm, k.tpm) for k in keys] == expected
    assert all("sk-" not in repr(k) for k in keys)  # a log line never shows a secret


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        pytest.param(
            [{"id": "a", "secret_env": "NOT_SET_ANYWHERE"}],
            "auth.keys[0].secret_env: environment variable NOT_SET_ANYWHERE is not set",
            id="missing_env_var",
        ),
        pytest.param(
            [{"id": "a", "secret_file": "{dir}/no-such-file"}],
            "auth.keys[0].secret_file: {dir}/no-such-file: cannot read: No such file or directory",
            id="missing_file",
        ),
        pytest.param(
            [{"id": "a", "secret_file": "{dir}"}],
            "auth.keys[0].secret_file: {dir}: cannot read: Is a directory",
            id="file_is_a_directory",
        ),
        pytest.param(
            [{"id": "a", "secret_file": "{dir}/binary"}],
            "auth.keys[0].secret_file: {dir}/binary: cannot read:",
            id="file_not_utf8",
        ),
        pytest.param(
            [{"id": "a", "secret_env": "EMPTY_KEY"}],
            "auth.keys[0]: the secret is empty (variable EMPTY_KEY)",
            id="empty_secret_env",
        ),
        pytest.param(
            [{"id": "a", "secret_file": "{dir}/blank"}],
            "auth.keys[0]: the secret is empty (file {dir}/blank)",
            id="empty_secret_file",
        ),
        pytest.param(
            [{"id": "a", "secret_env": "TEAM_A_KEY"}, {"id": "a", "secret_file": "{dir}/team-b"}],
            "auth.keys[1].id: duplicate key id 'a'",
            id="duplicate_ids",
        ),
        pytest.param(
            [{"id": "a", "secret_env": "TEAM_A_KEY"}, {"id": "b", "secret_env": "SAME_AS_A"}],
            "auth.keys: b has the same secret as a",
            id="duplicate_secrets",
        ),
        pytest.param(
            [{"id": "a"}], "auth.keys[0]: give one of secret_env or secret_file", id="no_secret"
        ),
        pytest.param(
            [{"id": "a", "secret_env": "TEAM_A_KEY", "secret_file": "{dir}/team-b"}],
            "auth.keys[0]: give one of secret_env or secret_file",
            id="both_secrets",
        ),
        pytest.param(
            [{"secret_env": "TEAM_A_KEY"}], "auth.keys[0].id: '' is not a key id", id="no_id"
        ),
        pytest.param(
            [{"id": "team a", "secret_env": "TEAM_A_KEY"}],
            "auth.keys[0].id: 'team a' is not a key id",
            id="id_with_space",
        ),
        pytest.param(
            [{"id": "none", "secret_env": "TEAM_A_KEY"}],
            "auth.keys[0].id: 'none' is reserved",
            id="reserved_id",
        ),
        pytest.param(
            [{"id": "a", "secret_env": "TEAM_A_KEY", "rpm": 0}],
            "auth.keys[0].rpm: must be >= 1 (unset: no limit)",
            id="zero_rpm",
        ),
        pytest.param(
            [{"id": "a", "secret_env": "TEAM_A_KEY", "tpm": "lots"}],
            "auth.keys[0].tpm: must be an integer, got 'lots'",
            id="tpm_not_a_number",
        ),
        pytest.param(
            [{"id": "a", "secret": "sk-inline"}],
            "auth.keys[0].secret: unknown field",
            id="inline_secret_refused",
        ),
    ],
)
def test_an_unusable_key_is_a_clear_error(
    secrets: Path, keys: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message.format(dir=secrets))) as raised:
        _load({"keys": keys}, secrets)
    assert "sk-team" not in str(raised.value)
