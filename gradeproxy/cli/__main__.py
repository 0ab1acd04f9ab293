"""``python -m gradeproxy.cli``: the same as the ``gradeproxy`` console script."""

from gradeproxy.cli import main

raise SystemExit(main())
