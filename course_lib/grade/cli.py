"""The command line: which notebooks, how many at once, and where the gradebook goes.

    python -m course_lib.grade [PATHS ...] [--release DIR] [-j N] [--csv PATH] [--json PATH]
                               [--timeout S] [--notebook-timeout S] [--memory-limit SIZE]

A PATH is a notebook, or a folder: its own notebooks, and the `NN_*.ipynb` notebooks of each
folder inside it (a class: `submissions/<student>/01_random_rotation.ipynb`). The student
is the name of the folder that holds the notebook. With `-j N`, N notebooks are graded at
once, each in a process of its own. The exit status is 0 when every notebook passed, 1 when
one did not, 2 when there was nothing to grade.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import re
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from course_lib.grade import report
from course_lib.grade.judge import grade_notebook
from course_lib.grade.results import Grade
from course_lib.grade.run import DEFAULT_NOTEBOOK_TIMEOUT_S, DEFAULT_TIMEOUT_S, Limits

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def memory_size(text: str) -> int:
    """Bytes in "4G", "512M", "1.5GiB" or "1000000"."""
    found = _SIZE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes or a number "
                                         "with K, M, G or T, such as 4G")
    power = ("", "K", "M", "G", "T").index(found.group(2).upper())
    return int(float(found.group(1)) * 1024 ** power)


def _visible(paths) -> list[Path]:
    return sorted(path for path in paths if not path.name.startswith("."))


def notebook_paths(arguments: list[str]) -> list[Path]:
    """The notebooks named, those in the folders named, and those of their student folders."""
    found = []
    for argument in arguments or ["exercises"]:
        path = Path(argument)
        if path.is_dir():
            found += _visible(path.glob("*.ipynb"))
            for folder in _visible(child for child in path.iterdir() if child.is_dir()):
                found += _visible(folder.glob("[0-9][0-9]_*.ipynb"))
        elif path.suffix == ".ipynb" and path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"{argument}: not a notebook (.ipynb) or a folder of notebooks. "
                             "Give the path of an exercise, or of a folder of them.")
    return found


def _progress(done: int, total: int, grade: Grade) -> None:
    result = "passed" if grade.passed else "FAILED"
    print(f"[{done}/{total}] {grade.student}/{grade.name}: {result} "
          f"({report.points_text(grade.points)}/{report.points_text(grade.possible)} points, "
          f"{grade.seconds:.1f} s)", file=sys.stderr, flush=True)


def grade_all(paths: list[Path], release: Path | None, limits: Limits,
              jobs: int = 1) -> list[Grade]:
    """The grades of `paths`, in their order, `jobs` notebooks at a time."""
    if jobs == 1 or len(paths) == 1:
        grades = []
        for number, path in enumerate(paths, start=1):
            grades.append(grade_notebook(path, release, limits))
            _progress(number, len(paths), grades[-1])
        return grades
    grades: list[Grade | None] = [None] * len(paths)
    spawn = multiprocessing.get_context("spawn")  # no inherited threads or sockets
    with ProcessPoolExecutor(max_workers=jobs, mp_context=spawn) as pool:
        futures = {pool.submit(grade_notebook, path, release, limits): number
                   for number, path in enumerate(paths)}
        for done, future in enumerate(as_completed(futures), start=1):
            number = futures[future]
            try:
                grades[number] = future.result()
            except Exception as error:  # the worker process itself died
                grades[number] = Grade(paths[number].stem, paths[number].resolve().parent.name,
                                       str(paths[number]),
                                       problem=f"could not be graded: {error!r}")
            _progress(done, len(paths), grades[number])
    return grades


@contextlib.contextmanager
def _terminate_cleanly():
    """SIGTERM becomes SystemExit, so that each kernel is closed and its processes killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.grade",
        description="Grade exercise notebooks against their released copies, each in a fresh "
                    "kernel, and print a scoreboard.")
    parser.add_argument("paths", nargs="*",
                        help="notebooks, or folders of them or of student folders "
                             "(default: exercises/)")
    parser.add_argument("--release", type=Path, default=None,
                        help="the folder of released exercises (default: the installed "
                             "course's exercises/)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one cell may run (default {DEFAULT_TIMEOUT_S})")
    parser.add_argument("--notebook-timeout", type=float, default=DEFAULT_NOTEBOOK_TIMEOUT_S,
                        help="seconds one notebook may run, all cells together (default "
                             f"{DEFAULT_NOTEBOOK_TIMEOUT_S})")
    parser.add_argument("--memory-limit", type=memory_size, default=None,
                        help="address space each kernel process may map, e.g. 4G "
                             "(default: no limit)")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="notebooks graded at once (default 1)")
    parser.add_argument("--csv", type=Path, help="write the gradebook as CSV here")
    parser.add_argument("--json", type=Path, help="write the gradebook as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.jobs < 1:
        parser.error(f"-j must be at least 1, got {arguments.jobs}: give how many notebooks "
                     "to grade at once")
    try:
        limits = Limits(arguments.timeout, arguments.notebook_timeout, arguments.memory_limit)
    except ValueError as error:
        parser.error(str(error))
    paths = notebook_paths(arguments.paths)
    if not paths:
        print("No notebooks to grade: give exercise notebooks, a folder that holds them, or a "
              "folder of student folders.", file=sys.stderr)
        return 2
    with _terminate_cleanly():
        grades = grade_all(paths, arguments.release, limits, arguments.jobs)
    print(report.scoreboard(grades))
    if arguments.csv:
        report.write_csv(grades, arguments.csv)
    if arguments.json:
        report.write_json(grades, arguments.json)
    return 0 if all(grade.passed for grade in grades) else 1
