"""``python -m grader.cli``: the same as the ``gradeproxy`` console script."""

from grader.cli import main

raise SystemExit(main())
