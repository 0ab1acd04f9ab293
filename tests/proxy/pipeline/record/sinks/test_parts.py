"""The sink's parts on their own: the config it takes, the spill file's promise never to cut a
row it has not written, and a full disk counted, never silent (a real PostgreSQL where one is
needed; /dev/full for the full disk)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, load_config
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.results import ResultsWriteError
from proxy.pipeline.record.sinks.postgres import PostgresStore
from proxy.pipeline.record.sinks.spill import SpillFile
from proxy.pipeline.record.sinks.writer import SinkSettings, SinkWriter
from proxy.rowsdb import DB_SCHEMA_VERSION
from tests.support.postgres import PASSWORD, PostgresServer
from tests.support.rowsets import jsonl, live_rows

V1 = {"upstream": {"url": "http://127.0.0.1:8000/v1"}}
SINK = "postgresql://gp@db:5432/rows"


@pytest.mark.parametrize(
    ("results", "environ", "message"),
    [
        pytest.param({"sink": "mysql://db/x"}, {}, "results.sink: must be a postgresql:// URL",
                     id="not_postgres"),
        pytest.param({"sink": "postgresql://gp:hunter2@db/rows"}, {},
                     "results.sink: must not hold a password", id="password_in_url"),
        pytest.param({"sink": SINK, "sink_password_env": "NOPE_PW"}, {},
                     "results.sink_password_env: environment variable NOPE_PW is not set",
                     id="env_unset"),
        pytest.param({"sink": SINK, "sink_password_env": "PW", "sink_password_file": "/x"},
                     {"PW": "s"}, "give one, not both", id="env_and_file"),
        pytest.param({"sink": SINK, "sink_password_file": "/nonexistent/pw"}, {},
                     "results.sink_password_file: /nonexistent/pw: no such file", id="no_file"),
        pytest.param({"sink": SINK, "sink_batch_rows": 0}, {}, "sink_batch_rows: must be >= 1",
                     id="batch"),
        pytest.param({"sink": SINK, "sink_buffer_bytes": 10}, {},
                     "sink_buffer_bytes: must be >= 65536", id="buffer"),
        pytest.param({"sink": SINK, "sink_retry_s": 0}, {}, "sink_retry_s: must be > 0",
                     id="retry"),
    ],
)  # fmt: skip
def test_sink_config_errors_name_the_key(
    results: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, {**V1, "results": results}, environ)


def test_a_valid_sink_config_loads_and_keeps_the_password_out(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    config = load_config(
        None, {**V1, "results": {"sink": SINK, "sink_password_file": str(secret)}}, {}
    )
    assert config.results.sink == SINK
    assert "s3cret" not in repr(config)


def test_the_spill_is_emptied_only_when_every_row_in_it_was_read(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl")
    first = jsonl(live_rows(3))
    spill.append([first])
    lines, offset = spill.read(0, 1 << 20)
    assert b"".join(lines) == first
    spill.append([b'{"late":1}\n'])  # appended while the backfill wrote the first rows
    assert not spill.clear_if_read_to(offset)  # the late row stays
    assert (tmp_path / "spill.jsonl").read_bytes() == first + b'{"late":1}\n'
    lines, offset = spill.read(offset, 1 << 20)
    assert lines == [b'{"late":1}\n']
    assert spill.clear_if_read_to(offset)
    assert spill.size == 0
    spill.close()


@pytest.mark.parametrize(
    "max_bytes", [pytest.param(7, id="tiny_reads"), pytest.param(1 << 20, id="big")]
)
def test_spill_reads_return_whole_rows(tmp_path: Path, max_bytes: int) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl")
    data = jsonl(live_rows(4))
    spill.append([data])
    got: list[bytes] = []
    offset = 0
    while offset < spill.size:
        lines, offset = spill.read(offset, max_bytes)
        got += lines
    assert b"".join(got) == data
    spill.close()


def metrics() -> ProxyMetrics:
    return ProxyMetrics()


def sample(m: ProxyMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = m.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_under_an_outage_is_counted_as_dropped(tmp_path: Path) -> None:
    port_closed = "postgresql://gp@127.0.0.1:1/rows"  # nothing listens on port 1
    m = metrics()
    writer = SinkWriter(
        PostgresStore(port_closed, "x", timeout_s=1),
        Path("/dev/full"),
        m,
        SinkSettings(retry_s=0.05, close_timeout_s=5),
    )
    deadline = time.monotonic() + 10
    while writer.health()["state"] != "spilling" and time.monotonic() < deadline:
        time.sleep(0.02)
    rows = jsonl(live_rows(2))
    (failed,) = writer.append_many([([rows], 4)])
    assert isinstance(failed, ResultsWriteError)
    assert failed.rows == 4
    writer.close()
    assert sample(m, "gradeproxy_rows_dropped_total", {"reason": "disk_full"}) == 4
    assert sample(m, "gradeproxy_sink_rows_spilled_total") == 0
    assert sample(m, "gradeproxy_sink_write_failures_total", {"reason": "unavailable"}) >= 1


def test_close_flushes_the_buffer_to_the_database(
    postgres: PostgresServer, tmp_path: Path, pg_password: str
) -> None:
    from gradeproxy.cli import main

    url = postgres.database()
    assert main(["db", "migrate", url]) == 0
    m = metrics()
    writer = SinkWriter(PostgresStore(url, PASSWORD), tmp_path / "spill.jsonl", m,
                        SinkSettings(flush_s=5.0, retry_s=5.0))  # fmt: skip
    rows = live_rows(50)
    writer.append_many([([jsonl(rows[i : i + 10])], 10) for i in range(0, 100, 10)])
    writer.close()  # before the flush interval: close writes them
    assert sample(m, "gradeproxy_sink_rows_written_total") == 100
    assert (tmp_path / "spill.jsonl").read_bytes() == b""
    assert DB_SCHEMA_VERSION == 1


@pytest.mark.parametrize("index", [0, 1, 7])
def test_each_worker_spills_to_a_file_of_its_own(index: int) -> None:
    from proxy.supervisor import worker_config

    config = load_config(
        None,
        {**V1, "listen": {"workers": 8}, "admin": {"port": 19000},
         "results": {"sink": SINK, "spill_path": "/data/spill.jsonl"}},
        {},
    )  # fmt: skip
    mine = worker_config(config, index).results
    assert mine.spill_path == Path(f"/data/spill.w{index}.jsonl")
    assert mine.sink == SINK  # one database for every worker
