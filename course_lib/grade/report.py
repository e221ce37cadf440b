"""The scoreboard, and a gradebook as CSV or JSON.

The scoreboard gives one row per notebook, then every message under it, wrapped and never
cut: the "Try this:" half of a check's message is the part that teaches. The root cause comes
first (a SyntaxError in an exercise cell explains the NameError of the checks after it), then
each check that did not pass, then what was restored from the release.

The gradebook has one row per student and exercise, with the columns of `COLUMNS`.
"""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

from course_lib.grade.results import Grade

COLUMNS = ("student", "exercise", "points", "points_possible", "passed", "seconds",
           "first_message", "checks", "restored", "notebook")
INDENT = "    "


def points_text(value: float) -> str:
    return f"{value:g}"


def _notes(grade: Grade) -> list[str]:
    notes = [grade.problem] if grade.problem else []
    if grade.root_cause:
        notes.append(f"first problem: {grade.root_cause}")
    if not grade.problem:
        notes += [f"check cell {check.cell}: {check.message}"
                  for check in grade.failing]
        if not grade.checks:
            notes.append(grade.message)
    notes += [f"restored: {note}" for note in grade.restored]
    return notes


def scoreboard(grades: list[Grade], width: int = 100) -> str:
    """One row per notebook with every message wrapped under it, then the totals."""
    students = len({grade.student for grade in grades}) > 1  # a class: name the student
    student_width = max([len("student"), *(len(grade.student) for grade in grades)])
    name_width = max([len("exercise"), *(len(grade.name) for grade in grades)])

    def columns(student: str, name: str, rest: str) -> str:
        first = f"{student:<{student_width}}  " if students else ""
        return f"{first}{name:<{name_width}}  {rest}"

    lines = [columns("student", "exercise", "points  result  seconds"), "-" * width]
    for grade in grades:
        points = f"{points_text(grade.points)}/{points_text(grade.possible)}"
        result = "passed" if grade.passed else "FAILED"
        lines.append(columns(grade.student, grade.name,
                             f"{points:>6}  {result:<6}  {grade.seconds:7.1f}"))
        for note in _notes(grade):
            lines += textwrap.wrap(note, width, initial_indent=INDENT,
                                   subsequent_indent=INDENT * 2, break_long_words=False,
                                   break_on_hyphens=False) or [INDENT]
    passed = sum(grade.passed for grade in grades)
    earned = sum(grade.points for grade in grades)
    possible = sum(grade.possible for grade in grades)
    lines += ["-" * width, f"{passed} of {len(grades)} passed, {points_text(earned)} of "
              f"{points_text(possible)} points"]
    return "\n".join(lines)


def row(grade: Grade) -> dict:
    """One gradebook row: what the CSV and the JSON hold (checks and restored as lists)."""
    return {
        "student": grade.student, "exercise": grade.name, "points": grade.points,
        "points_possible": grade.possible, "passed": grade.passed,
        "seconds": round(grade.seconds, 2), "first_message": grade.message,
        "checks": [{"cell": check.cell, "verdict": check.verdict, "points": check.points,
                    "points_possible": check.possible, "message": check.message}
                   for check in grade.checks],
        "restored": list(grade.restored), "notebook": grade.path,
    }


def write_json(grades: list[Grade], path: str | Path) -> None:
    Path(path).write_text(json.dumps([row(grade) for grade in grades], indent=2,
                                     ensure_ascii=False) + "\n")


def write_csv(grades: list[Grade], path: str | Path) -> None:
    """The same rows; `checks` reads "cell 7: passed; cell 10: failed", `restored` joins by ";"."""
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        for grade in grades:
            values = row(grade)
            values["points"] = points_text(values["points"])
            values["points_possible"] = points_text(values["points_possible"])
            values["checks"] = "; ".join(f"cell {check['cell']}: {check['verdict']}"
                                         for check in values["checks"])
            values["restored"] = "; ".join(values["restored"])
            writer.writerow(values)
