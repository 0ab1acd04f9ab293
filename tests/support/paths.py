"""Where the tests find the repository's files.

One root for every test module, so a module can move in the tree without recounting
``Path(__file__).parents[N]``; the recorded wire formats are data beside the tests.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WIRE = REPO / "tests" / "fixtures" / "wire"
