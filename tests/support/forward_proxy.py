"""A real forward proxy on loopback: Debian's tinyproxy, started from a temporary config on a
free port and stopped after the test. Its ``Via`` header on forwarded requests shows that a
request went through it; https goes through ``CONNECT`` (any port allowed)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

VIA_NAME = "gradeproxy-test-proxy"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def tinyproxy(folder: Path) -> Iterator[tuple[str, Path]]:
    """Run tinyproxy in the foreground; yield its URL (``http://127.0.0.1:PORT``) and its log
    (a ``CONNECT`` line for each tunnel it opened)."""
    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    if not Path(binary).exists():
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy)")
    port = _free_port()
    config, log = folder / "tinyproxy.conf", folder / "tinyproxy.log"
    config.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 64\nAllow 127.0.0.1\n"
        f'LogFile "{log}"\nLogLevel Connect\nViaProxyName "{VIA_NAME}"\n'
    )
    process = subprocess.Popen(
        [binary, "-d", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"tinyproxy did not start: {text}")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        process.wait(5)
