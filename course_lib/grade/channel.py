"""How a check's verdict reaches the grader, so that the notebook cannot forge it.

Counting "no error output" as a pass trusts every cell that ran before the check: a learner
cell can replace `checks.check_rotation`, swallow exceptions with `set_custom_exc`, silence
`showtraceback`, or rewrite later cells with an input transformer. So the grader never runs a
check cell as a cell. For each one it picks, at that moment, a one-time nonce, a one-time
HMAC key and a one-time result file in a folder of its own, and sends `in_kernel.py` in the
execute request's `user_expressions` (evaluated by IPython without transformers or hooks).
That program loads the checks afresh from their source files, runs the released cell's
source, and writes the outcome sealed with the key. A check passes only when that file comes
back, sealed with this key, for this nonce and this cell, and says it passed; anything else
(no file, a broken seal, an exception) is a failure.

The limit: code running in the same interpreter can, with enough effort, reach anything the
interpreter holds, this program's frames included. The seal stops forgeries made before the
check runs; grading untrusted work safely also needs a container (see README, "Grading a
class").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

PROGRAM = Path(__file__).with_name("in_kernel.py").read_text()
CHECKS_FOLDER = Path(__file__).resolve().parent.parent / "checks"  # the installed checks


@dataclass(frozen=True)
class CheckRequest:
    """One check, as sent: the expression for `user_expressions` and what to expect back."""

    cell: int
    expression: str
    nonce: str
    key: str
    result: Path


@dataclass(frozen=True)
class Outcome:
    """What the check code reported: passed, or the exception that stopped it."""

    passed: bool
    ename: str = ""
    evalue: str = ""


def check_request(source: str, cell: int, results: Path,
                  checks_folder: Path = CHECKS_FOLDER) -> CheckRequest:
    """A request that runs the check cell `source` (cell `cell` of the release)."""
    nonce, key = secrets.token_hex(16), secrets.token_hex(32)
    result = results / f"{secrets.token_hex(16)}.json"
    params = {"nonce": nonce, "key": key, "cell": cell, "source": source,
              "checks": str(checks_folder), "result": str(result)}
    # Names a learner might reuse (exec, globals) are taken from builtins, not looked up.
    builtins = '__import__("builtins")'
    scope = (f'{{"__name__": "__grade_check__", "PARAMS": {params!r}, '
             f'"USER_NS": {builtins}.globals()}}')
    return CheckRequest(cell, f"{builtins}.exec({PROGRAM!r}, {scope})", nonce, key, result)


def read_outcome(request: CheckRequest) -> Outcome | None:
    """The sealed outcome of `request`, or None when none came back intact."""
    try:
        payload, seal = request.result.read_text().rsplit("\n", 1)
        request.result.unlink()
    except (OSError, ValueError):
        return None
    expected = hmac.new(request.key.encode(), payload.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(seal.strip(), expected):
        return None
    try:
        content = json.loads(payload)
    except ValueError:
        return None
    if content.get("nonce") != request.nonce or content.get("cell") != request.cell:
        return None
    if content.get("ok") is True:
        return Outcome(True)
    return Outcome(False, str(content.get("ename", "")), str(content.get("evalue", "")))
