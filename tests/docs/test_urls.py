"""Every upstream base URL the docs show ends in /v1: the documented mistake (a bare host, so
every request is a 404) must not come back in an example."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from tests.support.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
UPSTREAM = re.compile(r"--upstream[ =](\S+)|\burl: (http\S+)")


def examples() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in UPSTREAM.finditer(line):
                url = (match.group(1) or match.group(2)).strip("`'\",)")
                if url.startswith("http"):
                    found.append((f"{path.name}:{number}", url))
    return found


EXAMPLES = examples()


def test_the_docs_show_upstream_urls() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize(("where", "url"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_documented_upstream_url_ends_in_v1(where: str, url: str) -> None:
    assert urlsplit(url).path.rstrip("/").endswith("/v1"), f"{where}: {url}"
