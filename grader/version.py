"""Versions stamped on every result so a score can be traced to the rules that produced it."""

# Bump when any grading rule changes meaning (extraction, normalisation, comparison): results
# graded under different rule versions are not comparable, and every digest changes with it.
GRADER_RULES_VERSION = "2"

__version__ = "0.1.0"
