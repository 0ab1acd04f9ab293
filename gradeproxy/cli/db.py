"""``gradeproxy db migrate URL`` and ``gradeproxy db status URL``: the rows database's schema.

Run ``migrate`` once per upgrade (a Kubernetes Job, a compose one-shot service): it creates or
upgrades the table under an advisory lock. ``serve`` never migrates: a replica that finds the
schema missing or older spills its rows and says so on ``/readyz`` until it is migrated. The
password comes from libpq's ``PGPASSWORD`` or ``PGPASSFILE`` (or ``--password-file``), never
from the command line's URL into a log: every URL printed has its password masked.
Exit 0 on success; 2 on a bad URL, a missing driver or a database that cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "db",
        help="create, upgrade or inspect the rows database's schema",
        description="The shared rows database (results.sink): migrate its schema or show it.",
    )
    actions = parser.add_subparsers(dest="db_action", required=True, metavar="ACTION")
    for name, text in (
        ("migrate", "create or upgrade the schema (run once per upgrade)"),
        ("status", "print the schema version and the row count"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("url", metavar="URL", help="postgresql://user@host:port/db")
        action.add_argument(
            "--password-file", type=Path, help="read the password from this file (else PGPASSWORD)"
        )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # The rows database's module (and the server stack it sits in) only when this command runs:
    # the offline commands start without it.
    from proxy.rowsdb import (
        DB_SCHEMA_VERSION,
        RowsDatabaseError,
        connect,
        migrate,
        parse_url,
        redact,
        schema_version,
    )

    shown = redact(args.url)
    try:
        url = parse_url(args.url)
        password = None
        if args.password_file is not None:
            try:
                password = args.password_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise RowsDatabaseError(
                    f"{args.password_file}: cannot read: {exc.strerror}"
                ) from None
        import psycopg

        try:
            with connect(url.conninfo, password) as conn:
                if args.db_action == "migrate":
                    before, after = migrate(conn)
                    print(
                        f"{shown}: schema {'created' if before is None else f'version {before}'}"
                        f" -> version {after}"
                    )
                    return 0
                version = schema_version(conn)
                with conn.cursor() as cur:
                    count = None
                    if version is not None:
                        cur.execute("SELECT count(*) FROM gradeproxy_rows")
                        got = cur.fetchone()
                        count = got[0] if got else 0
                print(
                    f"{shown}: schema version {version if version is not None else 'none'}"
                    f" (this gradeproxy writes {DB_SCHEMA_VERSION}), rows {count}"
                )
                return 0
        except psycopg.Error as exc:
            raise RowsDatabaseError(f"{shown}: {str(exc).strip()}") from None
    except (RowsDatabaseError, ImportError) as exc:
        message = (
            str(exc) if isinstance(exc, RowsDatabaseError) else "pip install 'gradeproxy[postgres]'"
        )
        print(f"gradeproxy db: error: {message}", file=sys.stderr)
        return 2
