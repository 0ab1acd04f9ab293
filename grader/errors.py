"""The grader's exception tree: every error ``grader`` raises derives from :class:`GraderError`.

A failure to *grade* an answer is never an exception: it is a verdict (``no_call``,
``not_a_string`` …) or an ``error`` column. Exceptions are for definitions that cannot be used
(a task, a check, a pattern, a formula), requests that cannot be read, and bugs. Each class also
keeps the builtin base its callers have always caught (as aiohttp's ``client_exceptions`` mixes
``OSError`` and ``ValueError`` in), so ``except ValueError`` code keeps working::

    GraderError
    ├── TaskLoadError(ValueError)          grader.tasks      a task file or definition is unusable
    ├── TaskHasChecksError(ValueError)     grader.tasks      score() on a task with checks
    ├── NoExpectedCallError(LookupError)   grader.tasks      .expected of a checks-only task
    ├── UnknownTaskError(LookupError)      grader.api        an answer names no loaded task
    ├── ScoreRequestError(ValueError)      grader.api        a scoring request off a wire
    ├── CalibrationError(ValueError)       grader.analysis   labels that cannot calibrate
    ├── AdvisoryError(ValueError)          grader.advisory   an advisory mark or record unusable
    ├── GateError(ValueError)              grader.analysis   a promotion gate file or run unusable
    ├── JSONError(ValueError)              grader.json       not JSON the grader accepts
    │   └── JSONTooDeepError               grader.json       nested past the parser's bound
    ├── TooDeepError(ValueError)           grader.toolcall   a value past MAX_DEPTH
    ├── PatternError(ValueError)           grader.patterns   a pattern RE2 cannot bound
    ├── RecordError(ValueError)            grader.episodes   a grader record (seed 001) is unusable
    ├── BfclImportError(ValueError)        grader.importers  a BFCL file the importer cannot read
    ├── CheckDefinitionError(ValueError)   grader.checks     a check definition is unusable
    ├── PathError(ValueError)              grader.checks     a tool_call option path is malformed
    ├── TemplateError(LookupError)         grader.checks     a template did not resolve
    ├── FormulaError(ValueError)           grader.checks     a multi formula is not safe arithmetic
    ├── UnresolvableRefError(ValueError)   grader.checks     a $ref leaving the schema
    ├── JudgeParseError(ValueError)        grader.checks     a judge reply outside the contract
    ├── UnusableInputError(ValueError)     grader.intake     a batch input with nothing usable
    ├── DraftRowError(ValueError)          grader.drafts     a row or label drafts cannot read
    ├── FilterError(ValueError)            grader.drafts     a draft --filter that is unreadable
    ├── LabelError(ValueError)             grader.labels     a label or edited call unusable
    ├── PriceTableError(ValueError)        grader.pricing    a price table is unusable
    └── EnforceError(ValueError)           grader.enforce    an enforce entry or policy unusable

The console script's ``InputError`` (an answers file line it refuses, ``gradeproxy/cli/_io.py``)
derives from this root too. The judge's transport and its ``JudgeHTTPError`` are the proxy's
(``proxy/judge_client.py``, which the offline commands import lazily).
``tests/grader/test_errors.py`` keeps this drawing equal to the classes the package defines.
"""

from __future__ import annotations

__all__ = ["GraderError"]


class GraderError(Exception):
    """The root of every exception the grader raises."""
