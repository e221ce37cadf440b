"""Grade exercise notebooks: from the release copy, with verdicts the notebook cannot forge.

    python -m course_lib.grade [PATHS ...]          # or: feed-the-beast-grade [PATHS ...]
    python -m course_lib.grade submissions/ -j 2 --csv grades.csv --json grades.json

A learner checks their own work with it; an instructor grades a class with it. Either way
each submission is graded in four steps, one module each:

1. `assemble`: the notebook that runs is the released exercise (`exercises/`, or
   `--release DIR`) with only the learner's `exercise` cells taken from the submission; the
   check cells, tags and metadata come from the release, and the grade says what it restored.
2. `run` (with `kernel` and `channel`): the cells run in a fresh kernel with its own HOME
   and working folder, within a time budget per cell and per notebook, and nothing it started
   outlives it. Each check cell is sent as one sealed request: the check code is loaded
   afresh from the installed package, and its outcome comes back sealed with a one-time key.
   "No error output" is never taken for a pass.
3. `judge`: one verdict and its points per check cell, and the root cause of a failure.
4. `report` (with `cli`): the scoreboard, with every message in full, and the gradebook as
   CSV or JSON, one row per student and exercise.

What this does not do: code in the learner's cells runs in the same interpreter as the
checks, and such code can, with enough effort, subvert anything in that interpreter. Grade
work you do not trust inside a container without network and with a memory limit (README,
"Grading a class").
"""

from course_lib.grade.assemble import NoRelease, NotANotebook, assemble, read_notebook
from course_lib.grade.cli import main, notebook_paths
from course_lib.grade.judge import grade_notebook
from course_lib.grade.report import scoreboard, write_csv, write_json
from course_lib.grade.results import CellError, CheckResult, Grade
from course_lib.grade.run import DEFAULT_NOTEBOOK_TIMEOUT_S, DEFAULT_TIMEOUT_S, Limits

__all__ = [
    "DEFAULT_NOTEBOOK_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "CellError",
    "CheckResult",
    "Grade",
    "Limits",
    "NoRelease",
    "NotANotebook",
    "assemble",
    "grade_notebook",
    "main",
    "notebook_paths",
    "read_notebook",
    "scoreboard",
    "write_csv",
    "write_json",
]
