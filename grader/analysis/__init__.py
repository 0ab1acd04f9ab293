"""Statistics over result rows: judge calibration, primary-vs-shadow pairs, regrades, gates.

Each module reads rows or outcomes that the engine already produced; none grades an answer.
"""
