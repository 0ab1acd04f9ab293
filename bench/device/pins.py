"""Print ``name==version`` for every package ``gradeproxy serve`` imports, as installed here.

bench/device/prepare.sh downloads these as wheels for the lent machine's Python, which reaches
no registry: the project's runtime dependencies and its ``uvloop`` extra, followed through
their own requirements, each at the version this environment runs (so the figures there come
from the code that was tested here). Markers are evaluated for the target Python
(``--python-version``, default 3.12); a requirement installed nowhere here is an error, not a
silent gap.

Run: ``python bench/device/pins.py [--python-version 3.12]`` (from the project's venv).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("uvloop",)


def roots() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in EXTRAS:
        wanted += project["optional-dependencies"][extra]
    return [Requirement(text) for text in wanted]


def closure(start: list[Requirement], python: str) -> dict[str, str]:
    """Installed name -> version for ``start`` and everything it needs on ``python``."""
    environment = {"python_version": python, "python_full_version": f"{python}.0", "extra": ""}
    pins: dict[str, str] = {}
    todo = list(start)
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        if name in pins:
            continue
        try:
            pins[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is required but not installed here") from None
        todo += [Requirement(text) for text in metadata.requires(name) or []]
    return pins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args()
    for name, version in sorted(closure(roots(), args.python_version).items()):
        print(f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
