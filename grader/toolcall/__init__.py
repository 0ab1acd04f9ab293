"""grading.md's tool-call grader: extract a call, canonicalise it, find the first differing path.

``extract`` finds the candidate calls in an answer (linear-time, bounded), ``canon`` normalises
values, ``diff`` walks two canonical values to their first differing path and reason code, and
``match`` puts them together as ``match_call(expected, stale, answer) -> Verdict``. ``rules`` is
seed 001's authority and call-link rule, which the ``policy`` check and the episode replay share
(it sits here, below both, so neither imports the other).
"""
