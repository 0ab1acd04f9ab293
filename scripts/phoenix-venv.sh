#!/usr/bin/env bash
# Builds Arize Phoenix's own virtual environment for the `phoenix` tests (issue 20): Phoenix pins
# its own OpenTelemetry, SQLAlchemy and web stack, so it never shares the project's venv; the
# test starts `phoenix serve` from it as a subprocess on loopback. Cached in .cache/phoenix-venv
# (git-ignored); a second run only checks the stamp.
#
#   scripts/phoenix-venv.sh          # build if missing or stale, print the interpreter path
#
# Environment:
#   PYTHON   the interpreter that creates the venv (default: python3)
set -euo pipefail

# Exact version: what the test reads back (its REST API's spans and span annotations, and how
# it maps a span's attributes) was checked on it.
readonly PHOENIX="arize-phoenix==20.26.1"

# shellcheck source=scripts/_venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cached_venv phoenix-venv "${PHOENIX}" phoenix
