# shellcheck shell=bash
# Sourced by scripts/*-venv.sh: a pinned package in a cached virtual environment of its own.
#
#   cached_venv NAME REQUIREMENT EXECUTABLE
#
# builds .cache/NAME with REQUIREMENT installed unless it is there already with the same
# requirement (a stamp file) and bin/EXECUTABLE, then prints its interpreter's path (pip's
# output goes to stderr). PYTHON is the interpreter that creates it (default: python3).
# Callers may race (pytest-xdist workers each asking for the same venv): a lock file beside it
# makes the second wait for the first build and then reuse it, instead of deleting it mid-build.

cached_venv() {
    local name="$1" requirement="$2" executable="$3"
    local root venv stamp lock
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    venv="${root}/.cache/${name}"
    stamp="${venv}/.gradeproxy-stamp"
    mkdir -p "${root}/.cache"
    exec {lock}>"${root}/.cache/${name}.lock"
    flock "${lock}"
    _cached_venv_build "${venv}" "${stamp}" "${requirement}" "${executable}"
    local status=$?
    flock -u "${lock}"
    exec {lock}>&-
    return "${status}"
}

_cached_venv_build() {
    local venv="$1" stamp="$2" requirement="$3" executable="$4"
    if [ -x "${venv}/bin/${executable}" ] && [ "$(cat "${stamp}" 2>/dev/null)" = "${requirement}" ]; then
        echo "${venv}/bin/python"
        return 0
    fi
    rm -rf "${venv}"
    "${PYTHON:-python3}" -m venv "${venv}"
    "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check "${requirement}" >&2
    echo "${requirement}" > "${stamp}"
    echo "${venv}/bin/python"
}
