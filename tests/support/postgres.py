"""A real PostgreSQL server for the tests: Debian's ``initdb`` and ``pg_ctl`` in a temp dir.

The server listens on 127.0.0.1 on a free port with password (SCRAM) authentication, so the
password paths are real too; run as ``postgres`` when the tests run as root (PostgreSQL refuses
root). Tests that need the database skip, naming why, only when no server binaries exist; CI
installs them. Each test gets a database of its own (:meth:`PostgresServer.database`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

USER = "gradeproxy"
PASSWORD = "test-secret-Z9"


def server_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``, or None when the server is not installed."""
    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(found) / "initdb").exists() and (Path(found) / "pg_ctl").exists():
            return Path(found)
    initdb = shutil.which("initdb")
    return Path(os.path.realpath(initdb)).parent if initdb else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One server: start, stop (an outage), and a fresh database per test."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin = bin_dir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.log = root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            account = pwd.getpwnam("postgres")
            os.chown(root, account.pw_uid, account.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        pwfile = root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run(
            "initdb", "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}",
            "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync",
        )  # fmt: skip

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, database: str = "postgres", with_password: bool = False) -> str:
        secret = f":{PASSWORD}" if with_password else ""
        return f"postgresql://{USER}{secret}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A fresh empty database; its URL (no password: give ``PGPASSWORD``)."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(with_password=True), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def start_server() -> Iterator[PostgresServer]:
    bin_dir = server_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="gradeproxy-pg-"))
    try:
        server = PostgresServer(bin_dir, root)
        server.start()
        try:
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):  # a test stopped it
                server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The session's server (never stopped by a test: outage tests take :func:`own_postgres`)."""
    yield from start_server()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of the test's own, which it may stop and start (an outage)."""
    yield from start_server()


@pytest.fixture
def pg_password(monkeypatch: pytest.MonkeyPatch) -> str:
    """libpq's ``PGPASSWORD`` set for the test (the offline commands read it, as psql does)."""
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return PASSWORD
