"""Grade exercise notebooks: run each in a fresh kernel and print a scoreboard.

    python -m course_lib.grade [PATHS ...] [--timeout SECONDS]
    feed-the-beast-grade [PATHS ...]

PATHS are notebooks or folders of them (default: `exercises/`). Each notebook is read into
memory and that copy runs from top to bottom in a fresh kernel, in fast mode
(`COURSE_FAST=1`), in an empty temporary folder, so the learner's file is never touched.
A notebook passes when every cell runs without an error and it has at least one check cell
(tagged `check`). The scoreboard gives, for each failure, the
first message that explains it: a check's verdict, "not solved yet" with the stub's hint, or
the error of the first other cell that failed. The exit status is 0 when every notebook
passed, 1 when one failed, 2 when there was nothing to grade.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHECK_TAG = "check"
DEFAULT_TIMEOUT_S = 300


@dataclass(frozen=True)
class CellError:
    """An error one code cell ended with."""

    index: int  # position among all the notebook's cells
    tags: tuple[str, ...]
    ename: str
    evalue: str

    @property
    def in_check(self) -> bool:
        return CHECK_TAG in self.tags


@dataclass
class Grade:
    """The verdict on one notebook."""

    name: str
    passed: bool
    message: str = ""
    errors: list[CellError] = field(default_factory=list)
    check_cells: int = 0
    seconds: float = 0.0


def _explain(error: CellError) -> str:
    if error.ename == "NotImplementedError":
        return f"not solved yet: {error.evalue}"
    if error.ename == "AssertionError" and error.in_check:
        return error.evalue
    place = "check cell" if error.in_check else "cell"
    return f"{place} {error.index} raised {error.ename}: {error.evalue}"


@contextlib.contextmanager
def _fast_mode():
    """The kernel inherits this process's environment: fast mode while it starts."""
    saved = os.environ.get("COURSE_FAST")
    os.environ["COURSE_FAST"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COURSE_FAST", None)
        else:
            os.environ["COURSE_FAST"] = saved


def run_notebook(path: Path, timeout: int = DEFAULT_TIMEOUT_S):
    """Run a copy of the notebook at `path` in a fresh kernel, in an empty temporary folder
    (what its cells write lands there); return the executed copy."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = nbformat.read(path, as_version=4)  # the copy that runs; the file is not written
    with tempfile.TemporaryDirectory(prefix="grade-") as folder:
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                allow_errors=True, resources={"metadata": {"path": folder}})
        with _fast_mode():
            try:
                client.execute()
            except CellTimeoutError:
                return notebook, f"a cell ran longer than the {timeout} s limit"
            except DeadKernelError as error:
                return notebook, f"the kernel died ({error})"
    return notebook, None


def cell_errors(notebook) -> list[CellError]:
    """Every code cell that ended in an error, in order."""
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                tags = tuple(cell.get("metadata", {}).get("tags", []))
                found.append(CellError(index, tags, output.get("ename", ""),
                                       output.get("evalue", "")))
                break
    return found


def grade_notebook(path: str | Path, timeout: int = DEFAULT_TIMEOUT_S) -> Grade:
    """Run the notebook at `path` (a copy of it) and judge it."""
    path = Path(path)
    start = time.perf_counter()
    notebook, stopped = run_notebook(path, timeout)
    errors = cell_errors(notebook)
    checks = sum(CHECK_TAG in cell.get("metadata", {}).get("tags", [])
                 for cell in notebook.cells if cell.cell_type == "code")
    grade = Grade(path.stem, passed=not errors and not stopped and checks > 0,
                  errors=errors, check_cells=checks, seconds=time.perf_counter() - start)
    if stopped:
        grade.message = stopped
    elif errors:
        first_check = next((error for error in errors if error.in_check), None)
        grade.message = _explain(first_check or errors[0])
    elif checks == 0:
        grade.message = f"no cell is tagged '{CHECK_TAG}', so nothing was checked"
    return grade


def notebook_paths(arguments: list[str]) -> list[Path]:
    """The notebooks named, and those inside the folders named, in order."""
    found = []
    for argument in arguments or ["exercises"]:
        path = Path(argument)
        if path.is_dir():
            found += sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"{argument}: not a notebook (.ipynb) or a folder of notebooks. "
                             "Give the path of an exercise, or of the exercises/ folder.")
    return found


def scoreboard(grades: list[Grade], width: int = 100) -> str:
    """One line per notebook, then the totals."""
    name_width = max([len("exercise"), *(len(grade.name) for grade in grades)])
    lines = [f"{'exercise':<{name_width}}  result  first problem", "-" * width]
    for grade in grades:
        result = "passed" if grade.passed else "FAILED"
        message = grade.message.replace("\n", " ")
        room = width - name_width - 10
        if len(message) > room:
            message = message[:room - 1] + "…"
        lines.append(f"{grade.name:<{name_width}}  {result:<6}  {message}".rstrip())
    passed = sum(grade.passed for grade in grades)
    lines += ["-" * width, f"{passed} of {len(grades)} passed"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grade",
        description="Run exercise notebooks in fresh kernels and print a scoreboard.")
    parser.add_argument("paths", nargs="*", help="notebooks or folders (default: exercises/)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one cell may run (default {DEFAULT_TIMEOUT_S})")
    arguments = parser.parse_args(argv)
    if arguments.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {arguments.timeout}")
    paths = notebook_paths(arguments.paths)
    if not paths:
        print("No notebooks to grade: give exercise notebooks or a folder that holds them.",
              file=sys.stderr)
        return 2
    grades = []
    for number, path in enumerate(paths, start=1):
        print(f"[{number}/{len(paths)}] grading {path} ...", file=sys.stderr, flush=True)
        grades.append(grade_notebook(path, arguments.timeout))
    print(scoreboard(grades))
    return 0 if all(grade.passed for grade in grades) else 1


if __name__ == "__main__":
    sys.exit(main())
