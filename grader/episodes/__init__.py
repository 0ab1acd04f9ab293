"""Agent episodes: a whole run graded against seed 001's grader record (docs/episodes.md).

Pure like the rest of ``grader``: no aiohttp, no I/O. The proxy (proxy/pipeline/episodes.py)
and ``gradeproxy replay`` (gradeproxy/cli/replay.py) share every line of it, so an episode gives
the same row live and offline. Layout::

    values.py    the record's frozen values (snapshot, effects, targets, links, bundles)
    log.py       the event log from chat messages, Responses items or plain events
    replay.py    the calls' effects applied, in order, to a copy of the snapshot
    columns.py   one verdict per configured column; absent columns stay absent
    record.py    parsing and validation, errors naming the path inside the record (it runs
                 the columns on the reset snapshot, so it sits above them; record_parts.py
                 holds the parts read against the snapshot)
    grade.py     the episode row (and the judge form of ``cause_correct``)
    report.py    per-column pass rates, the last row per episode id
    fixtures.py  recorded runs a task ships to prove its columns (validate-tasks)

It must never raise for an episode: what cannot be replayed is a reason in a column. The
authority and call-link rule the ``policy`` check shares is ``grader/toolcall/rules.py``.
"""
