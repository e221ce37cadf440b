"""Running an assembled notebook, cell by cell, within a time budget per cell and per notebook.

Ordinary cells run as cells; a check cell never does: `channel.py` sends it as one sealed
request, and what comes back sealed is its outcome. A cell that runs past its limit is
interrupted and named; when the interrupt does not stop it, the notebook's budget is spent or
the kernel dies, the cells after it do not run and their checks count as not run.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from course_lib.grade import channel
from course_lib.grade.assemble import is_check, tags
from course_lib.grade.kernel import Kernel, Reply

DEFAULT_TIMEOUT_S = 300  # per cell
DEFAULT_NOTEBOOK_TIMEOUT_S = 1200  # per notebook
SKIP_TAG = "skip-execution"  # honoured for release cells other than checks, as nbclient does


@dataclass(frozen=True)
class Limits:
    """How long a cell and a notebook may run, and how much memory a kernel may map."""

    cell_timeout: float = DEFAULT_TIMEOUT_S
    notebook_timeout: float = DEFAULT_NOTEBOOK_TIMEOUT_S
    memory_limit: int | None = None  # bytes of address space per process

    def __post_init__(self):
        for name in ("cell_timeout", "notebook_timeout"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}:"
                                 " give how long it may run, e.g. 300")
        if self.memory_limit is not None and self.memory_limit < 2**28:
            raise ValueError(f"memory_limit={self.memory_limit!r} bytes is below 256 MiB, too "
                             "little for a Python kernel: give e.g. 4G, or no limit")


@dataclass(frozen=True)
class CellRun:
    """How one code cell ended: ok, error, timeout, dead or not run (checks: also no verdict)."""

    index: int
    tags: tuple[str, ...]
    status: str
    ename: str = ""
    evalue: str = ""

    @property
    def check(self) -> bool:
        return "check" in self.tags

    @property
    def exercise(self) -> bool:
        return "exercise" in self.tags


def _limit_name(limits: Limits, timeout: float) -> str:
    if timeout < limits.cell_timeout:
        return f"the notebook's {limits.notebook_timeout:g} s budget"
    return f"the {limits.cell_timeout:g} s limit per cell"


def _run_check(kernel: Kernel, source: str, index: int, timeout: float,
               results: Path) -> tuple[Reply, channel.Outcome | None]:
    request = channel.check_request(source, index, results)
    reply = kernel.execute("", timeout, {"verdict": request.expression})
    outcome = channel.read_outcome(request) if reply.status == "ok" else None
    return reply, outcome


def _as_run(index: int, cell_tags: tuple[str, ...], reply: Reply, outcome, limit: str,
            check: bool) -> CellRun:
    if reply.status == "timeout":
        return CellRun(index, cell_tags, "timeout", "Timeout", f"ran longer than {limit}")
    if reply.status == "dead":
        return CellRun(index, cell_tags, "dead", "DeadKernel", "killed the kernel")
    if not check:
        return CellRun(index, cell_tags, reply.status, reply.ename, reply.evalue)
    if outcome is None:
        return CellRun(index, cell_tags, "no verdict", "NoVerdict",
                       f"no sealed verdict came back from the check (the kernel answered "
                       f"{reply.status!r}{': ' + reply.ename if reply.ename else ''})")
    if outcome.passed:
        return CellRun(index, cell_tags, "ok")
    return CellRun(index, cell_tags, "error", outcome.ename, outcome.evalue)


def run_cells(notebook, limits: Limits) -> list[CellRun]:
    """Run every code cell of `notebook` in a fresh, fenced kernel; one CellRun per cell."""
    runs: list[CellRun] = []
    stopped = ""
    with tempfile.TemporaryDirectory(prefix="grade-results-") as results, \
            contextlib.closing(Kernel(limits.memory_limit)) as kernel:
        deadline = time.monotonic() + limits.notebook_timeout  # from the kernel's first prompt
        for index, cell in enumerate(notebook.cells):
            cell_tags, check = tuple(tags(cell)), is_check(cell)
            if cell.cell_type != "code" or (not check and (
                    SKIP_TAG in cell_tags or not cell.source.strip())):
                continue
            timeout = min(limits.cell_timeout, deadline - time.monotonic())
            if not stopped and timeout <= 0:
                stopped = f"the notebook's {limits.notebook_timeout:g} s budget ran out"
            if stopped:
                runs.append(CellRun(index, cell_tags, "not run", "NotRun", stopped))
                continue
            if check:
                reply, outcome = _run_check(kernel, cell.source, index, timeout, Path(results))
            else:
                reply, outcome = kernel.execute(cell.source, timeout), None
            run = _as_run(index, cell_tags, reply, outcome, _limit_name(limits, timeout), check)
            runs.append(run)
            if run.status == "dead":
                last = kernel.log.strip().splitlines()[-1:] or [""]
                stopped = f"the kernel died in cell {index}" + (
                    f" ({last[0]})" if last[0] else "")
            elif run.status == "timeout" and (reply.stuck or timeout < limits.cell_timeout):
                stopped = f"cell {index} {run.evalue} and was stopped"
    return runs
