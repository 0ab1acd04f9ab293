"""The rows database sink against the JSONL file, through the public surface (``serve`` + wrk).

    python bench/rowsdb_bench.py [--seconds 10] [--outage 10] [--rss-outage 30]

Starts a real PostgreSQL (Debian's initdb + pg_ctl, as tests/support/postgres.py does), the
fast fake backend (bench/_servers.py) and ``gradeproxy serve`` processes, and prints, in one
run, with their anchors:

1. the driver: rows/s of one batched insert (500 rows, the sink's statement) with psycopg 3
   and with asyncpg (when installed), each from one client, against the same server;
2. graded throughput at c=16 with ``results.sink`` ÷ with ``results.path`` (goal >= 0.95);
3. p99 latency during a database outage of ``--outage`` s ÷ the same load without (goal <= 1.5);
4. rows/s one PostgreSQL takes from 3 writers at once (each the sink's PostgresStore, batches of
   500, as 3 replicas' sink threads), and the rows/s 3 ``serve`` replicas under wrk wrote;
5. the proxy's RSS before and during ``--rss-outage`` s of outage under load (the buffer is
   bounded by ``results.sink_buffer_bytes``; past it rows go to the spill file).

Figures go to docs/rows-database.md. Needs the ``postgres`` extra (asyncpg optional), wrk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _perf_load import (  # noqa: E402
    GRADED,
    LOAD_CPUS,
    LOAD_THREADS,
    SUBJECT_CPU,
    TASK,
    free_port,
    lua_script,
    rss_mib,
    started,
    wrk,
)

from grader.json import dumps  # noqa: E402
from proxy.rowsdb import INSERT, columns_of, connect, insert_params, migrate, write_batch  # noqa: E402
from tests.support.postgres import PASSWORD, PostgresServer, server_bin  # noqa: E402

SERVE = [sys.executable, "-m", "gradeproxy.cli", "serve"]
BATCH = 500


def sample_rows(count: int) -> list[dict[str, Any]]:
    from tests.support.rowsets import live_rows

    base = live_rows(max(1, count // 2 + 1))
    rows = []
    for index in range(count):
        row = dict(base[index % len(base)])
        row["row_id"] = str(uuid.uuid4())
        rows.append(row)
    return rows


def psycopg_rate(url: str, batches: list[list[tuple[Any, ...]]], copy: bool) -> float:
    """psycopg 3: COPY + INSERT … SELECT (the sink's way), or the one-statement unnest insert."""
    with connect(url, PASSWORD) as conn:
        start = time.perf_counter()
        for batch in batches:
            if copy:
                write_batch(conn, batch)
            else:
                conn.execute(INSERT, insert_params(batch))
                conn.commit()
        return sum(map(len, batches)) / (time.perf_counter() - start)


def asyncpg_rate(url: str, batches: list[list[tuple[Any, ...]]]) -> float | None:
    try:
        import asyncpg  # optional (not a dependency): measured only where installed
    except ImportError:
        return None
    statement = INSERT
    for index in range(1, 19):  # psycopg's %s placeholders as asyncpg's $n
        statement = statement.replace("%s", f"${index}", 1)

    async def run() -> float:
        conn = await asyncpg.connect(url, password=PASSWORD)
        # asyncpg wants uuid and timestamptz values as Python objects, not text.
        from datetime import datetime

        prepared = [
            [
                [uuid.UUID(v) for v in column] if i == 0
                else [datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None
                      for v in column] if i == 2
                else column
                for i, column in enumerate(insert_params(batch))
            ]
            for batch in batches
        ]  # fmt: skip
        start = time.perf_counter()
        for params in prepared:
            await conn.execute(statement, *params)
        rate = sum(map(len, batches)) / (time.perf_counter() - start)
        await conn.close()
        return rate

    return asyncio.run(run())


def batches_of(rows: list[dict[str, Any]]) -> list[list[tuple[Any, ...]]]:
    cols = [columns_of(row, dumps(row).decode()) for row in rows]
    return [cols[i : i + BATCH] for i in range(0, len(cols), BATCH)]


def fresh_db(server: PostgresServer) -> str:
    url = server.database()
    with connect(url, PASSWORD) as conn:
        migrate(conn)
    return url


def writer_process(url: str, rows: int, out: Any, ready: Any) -> None:
    """One replica's sink thread, alone: the rows built first, then written once every writer
    is ready (a barrier), so the writers overlap and only writing is timed."""
    from proxy.pipeline.record.sinks.postgres import PostgresStore

    store = PostgresStore(url, PASSWORD)
    store.open()
    lines = [dumps(row) + b"\n" for row in sample_rows(rows)]
    ready.wait()
    start = time.perf_counter()
    for i in range(0, len(lines), BATCH):
        store.write(lines[i : i + BATCH])
    out.put((rows, time.perf_counter() - start))
    store.close()


def count_rows(url: str) -> int:
    with connect(url, PASSWORD) as conn:
        got = conn.execute("SELECT count(*) FROM gradeproxy_rows").fetchone()
    return int(got[0]) if got else 0


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, server: PostgresServer) -> None:
        self.args = args
        self.work = work
        self.server = server
        self.tasks = work / "tasks.jsonl"
        self.tasks.write_text(TASK)
        self.script = lua_script(work, "graded", GRADED)

    def config(self, name: str, port: int, upstream: str, sink: str | None) -> Path:
        results = (
            f"results:\n  sink: {sink}\n  sink_password_env: PGPASSWORD\n"
            f"  spill_path: {self.work / name / 'spill.jsonl'}\n  sink_retry_s: 0.5\n"
            if sink
            else f"results:\n  path: {self.work / name / 'grades.jsonl'}\n"
        )
        path = self.work / f"{name}.yaml"
        path.write_text(
            f"upstream:\n  url: {upstream}\nlisten:\n  port: {port}\n"
            f"tasks:\n  path: {self.tasks}\n{results}"
            "logging:\n  level: warning\nshutdown:\n  drain_delay_s: 0\n"
        )
        return path

    def load(self, port: int, seconds: float, conns: int = 16) -> Any:
        return wrk(port, conns, seconds, self.script, LOAD_CPUS, min(LOAD_THREADS, conns))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--outage", type=float, default=10.0)
    parser.add_argument("--rss-outage", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds (best kept)")
    args = parser.parse_args()
    if server_bin() is None:
        raise SystemExit("bench/rowsdb_bench.py: no PostgreSQL server binaries (initdb, pg_ctl)")
    import os

    os.environ["PGPASSWORD"] = PASSWORD
    work = Path(tempfile.mkdtemp(prefix="rowsdb-bench-"))
    root = Path(tempfile.mkdtemp(prefix="rowsdb-bench-pg-"))
    bin_dir = server_bin()
    assert bin_dir is not None
    server = PostgresServer(bin_dir, root)
    server.start()
    try:
        return run(Bench(args, work, server))
    finally:
        with contextlib.suppress(Exception):
            server.stop()


def run(bench: Bench) -> int:
    args, server = bench.args, bench.server
    print("== 1. driver: batches of 500 rows, one client, the same server")
    rows = sample_rows(10000)
    copy = psycopg_rate(fresh_db(server), batches_of(rows), copy=True)
    unnest = psycopg_rate(fresh_db(server), batches_of(rows), copy=False)
    apg = asyncpg_rate(fresh_db(server), batches_of(rows))
    print(f"psycopg 3, COPY + INSERT SELECT (the sink): {copy:,.0f} rows/s")
    print(f"psycopg 3, unnest arrays insert:            {unnest:,.0f} rows/s")
    if apg is None:
        print("asyncpg: not installed (pip install asyncpg)")
    else:
        print(f"asyncpg, unnest arrays insert:              {apg:,.0f} rows/s")
        print(f"ratio asyncpg unnest / psycopg COPY: {apg / copy:.2f}x")

    backend_port = free_port()
    backend_argv = [
        sys.executable,
        str(ROOT / "bench" / "_servers.py"),
        "backend",
        str(backend_port),
    ]
    with started(backend_argv, backend_port, bench.work / "backend.log", LOAD_CPUS):
        upstream = f"http://127.0.0.1:{backend_port}/v1"
        print(f"\n== 2. graded throughput at c=16, {args.seconds:g} s, best of {args.rounds}")
        best: dict[str, Any] = {}
        for rnd in range(args.rounds):
            for kind in ("file", "db"):
                port = free_port()
                sink = fresh_db(server) if kind == "db" else None
                cfg = bench.config(f"{kind}{rnd}", port, upstream, sink)
                with started(
                    [*SERVE, "--config", str(cfg)],
                    port,
                    bench.work / f"{kind}{rnd}.log",
                    str(SUBJECT_CPU),
                ):
                    got = bench.load(port, args.seconds)
                if got.errors:
                    print(f"{kind}: {got.errors} errors in the run")
                if kind not in best or got.rps > best[kind].rps:
                    best[kind] = got
        for kind in ("file", "db"):
            print(f"{kind:4}: {best[kind].rps:,.0f} req/s  p50 {best[kind].p50_ms:.2f} ms  "
                  f"p99 {best[kind].p99_ms:.2f} ms")  # fmt: skip
        print(f"ratio db/file: {best['db'].rps / best['file'].rps:.3f}x (goal >= 0.95)")

        print(f"\n== 3. p99 during a {args.outage:g} s database outage / without (c=16)")
        span = args.outage + 4
        port = free_port()
        url = fresh_db(server)
        cfg = bench.config("outage", port, upstream, url)
        with started(
            [*SERVE, "--config", str(cfg)], port, bench.work / "outage.log", str(SUBJECT_CPU)
        ):
            calm = bench.load(port, span)

            def outage() -> None:
                time.sleep(2)
                server.stop()
                time.sleep(args.outage)
                server.start()

            side = threading.Thread(target=outage)
            side.start()
            rough = bench.load(port, span)
            side.join()
            deadline = time.monotonic() + 60
            while count_rows(url) < calm.requests + rough.requests and time.monotonic() < deadline:
                time.sleep(0.5)
            stored = count_rows(url)
        print(f"without: p99 {calm.p99_ms:.2f} ms, {calm.rps:,.0f} req/s, {calm.errors} errors")
        print(f"outage:  p99 {rough.p99_ms:.2f} ms, {rough.rps:,.0f} req/s, {rough.errors} errors")
        print(f"ratio p99 outage/without: {rough.p99_ms / calm.p99_ms:.2f}x (goal <= 1.5)")
        print(f"rows in the database after the backfill: {stored} of "
              f"{calm.requests + rough.requests} graded")  # fmt: skip

        print(
            "\n== 4. rows/s one PostgreSQL takes from 3 writers (the sink's store, batches of 500)"
        )
        url = fresh_db(server)
        queue: multiprocessing.Queue[tuple[int, float]] = multiprocessing.Queue()
        ready = multiprocessing.Barrier(3)
        procs = [multiprocessing.Process(target=writer_process, args=(url, 20000, queue, ready))
                 for _ in range(3)]  # fmt: skip
        for proc in procs:
            proc.start()
        results = [queue.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        total = sum(r for r, _ in results)
        wall = max(secs for _, secs in results)
        print(f"3 writers: {total / wall:,.0f} rows/s together ({count_rows(url)} rows stored)")
        one = fresh_db(server)
        alone = multiprocessing.Barrier(1)
        procs = [multiprocessing.Process(target=writer_process, args=(one, 20000, queue, alone))]
        procs[0].start()
        rows1, secs1 = queue.get(timeout=600)
        procs[0].join()
        print(
            f"1 writer:  {rows1 / secs1:,.0f} rows/s (ratio 3/1: {total / wall / (rows1 / secs1):.2f}x)"
        )

        url = fresh_db(server)
        ports = [free_port() for _ in range(3)]
        from contextlib import ExitStack

        with ExitStack() as stack:
            for index, port in enumerate(ports):
                cfg = bench.config(f"fleet{index}", port, upstream, url)
                stack.enter_context(started([*SERVE, "--config", str(cfg)], port,
                                            bench.work / f"fleet{index}.log", str(SUBJECT_CPU)))  # fmt: skip
            start = time.perf_counter()
            loads: list[Any] = []
            threads = [threading.Thread(target=lambda p=p: loads.append(bench.load(p, args.seconds, 8)))
                       for p in ports]  # fmt: skip
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            sent = sum(load.requests for load in loads)
            deadline = time.monotonic() + 60
            while count_rows(url) < sent and time.monotonic() < deadline:
                time.sleep(0.2)
            wall = time.perf_counter() - start
        print(f"3 serve replicas under wrk (c=8 each, {args.seconds:g} s): {sent} graded, "
              f"{count_rows(url)} rows stored, {sent / args.seconds:,.0f} rows/s "
              "(bound by the proxies' cores here, not the database)")  # fmt: skip

        print(f"\n== 5. RSS during a {args.rss_outage:g} s outage under load (c=16)")
        port = free_port()
        url = fresh_db(server)
        cfg = bench.config("rss", port, upstream, url)
        with started(
            [*SERVE, "--config", str(cfg)], port, bench.work / "rss.log", str(SUBJECT_CPU)
        ) as child:
            bench.load(port, 3)
            before = rss_mib(child.pid)
            server.stop()
            peak = [before]
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    peak.append(rss_mib(child.pid))
                    time.sleep(0.5)

            sampler = threading.Thread(target=sample)
            sampler.start()
            during = bench.load(port, args.rss_outage)
            stop.set()
            sampler.join()
            server.start()
            spill = bench.work / "rss" / "spill.jsonl"
            spilled = spill.stat().st_size if spill.exists() else 0
        print(f"RSS before {before:.1f} MiB, peak during the outage {max(peak):.1f} MiB "
              f"({max(peak) / before:.2f}x); {during.requests} requests, {during.errors} errors, "
              f"{spilled / 1e6:.1f} MB spilled")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
