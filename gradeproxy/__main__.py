"""``python -m gradeproxy``: the console script without the installed entry point."""

from gradeproxy.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
