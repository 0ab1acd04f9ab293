"""gradeproxy's composition root: the ``gradeproxy`` console script and nothing else.

It sits above both packages: the command line (``gradeproxy.cli``) wires the pure grading engine
(``grader``) to the server (``proxy``). Neither of them ever imports this package (an
import-linter contract in pyproject.toml holds that), so the arrows only point down:
``gradeproxy`` -> ``proxy`` -> ``grader``. docs/architecture.md draws the layout.
"""
