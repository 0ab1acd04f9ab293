"""Converters from other benchmarks' files to gradeproxy task files."""
