#!/usr/bin/env bash
# The BFCL conformance test's dependency: bfcl-eval at exactly the pinned version, without its
# ~60 model SDKs (--no-deps). Its AST checker needs only itself and filelock; the test stubs
# bfcl_eval.constants.model_config in sys.modules (tests/support/bfcl_checker.py), never on disk.
# Keep the pin equal to tests/support/bfcl_checker.py's BFCL_VERSION: data and checker change
# between releases, so the checked-in disagreement list belongs to one version.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-${GRADEPROXY_VENV:-.venv}/bin/python}"
"$PYTHON" -m pip install --quiet --no-deps "bfcl-eval==2026.3.23" "filelock==4.3.1"
