"""Generate the exercises from their solutions: `solutions/` is the one source.

In a solution notebook, the learner's part is marked inside code cells:

    def random_map(self, element, rng):
        ### BEGIN SOLUTION: draw the angle from `rng`, then rotate with `rotate_image`
        angle = rng.uniform(-self.max_degrees, self.max_degrees)
        ...
        ### END SOLUTION

A hint too long for one line goes on in comment lines that start with `###` right after
the BEGIN line. The exercise keeps everything else and turns each marked region into
`raise NotImplementedError("<the hint>")` at the region's indentation, so the
unsolved notebook still runs top to bottom and fails only where a check calls the stub.
A region must sit inside a function body: at the top level of a cell, or directly in a class
body, the `raise` would fire in the exercise cell itself. Outputs are cleared and the badges
point at `exercises/`.

    python tools/exercises.py generate     write exercises/ from solutions/
    python tools/exercises.py check        exit 1 when exercises/ is not what generate writes
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
import textwrap
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import notebooks  # the sibling tool: badges, setup cell, writing

ROOT = notebooks.ROOT
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?::\s*(?P<hint>.*\S))?\s*$")
END = re.compile(r"^[ \t]*### END SOLUTION\s*$")
HINT_MORE = re.compile(r"^[ \t]*###[ \t]+(?P<text>(?!END SOLUTION).*\S)\s*$")
LINE_LENGTH = 100  # ruff's line length (pyproject.toml), which the exercises must keep
DEFAULT_HINT = "write this part: the exercise text above says what it must do"
EXERCISE_TAG, CHECK_TAG = "exercise", "check"


class RegionError(ValueError):
    """A marked region that cannot become a working stub."""


def _raise_lines(indent: str, hint: str) -> list[str]:
    """`raise NotImplementedError(hint)`, over several lines when one would be too long."""
    line = f"{indent}raise NotImplementedError({hint!r})"
    if len(line) <= LINE_LENGTH:
        return [line]
    room = LINE_LENGTH - len(indent) - 6  # four spaces, two quotes
    words = textwrap.wrap(hint, room, break_long_words=False, drop_whitespace=False)
    parts = [f"{indent}    {part!r}" for part in words]
    return [f"{indent}raise NotImplementedError(", *parts[:-1], parts[-1] + ")"]


def stub_source(source: str, where: str = "cell") -> str:
    """`source` with every marked region replaced by `raise NotImplementedError(hint)`."""
    lines, out, region, hint = source.splitlines(), [], None, None
    for number, line in enumerate(lines, start=1):
        begin = BEGIN.match(line)
        if begin:
            if region is not None:
                raise RegionError(f"{where}, line {number}: BEGIN SOLUTION inside a region "
                                  f"opened on line {region}; close it with END SOLUTION first")
            region, indent, hint = number, begin.group("indent"), begin.group("hint") or ""
        elif END.match(line):
            if region is None:
                raise RegionError(f"{where}, line {number}: END SOLUTION without a BEGIN")
            if hint is not None:  # an empty region
                out += _raise_lines(indent, hint or DEFAULT_HINT)
            region, hint = None, None
        elif region is None:
            out.append(line)
        elif hint is not None:
            more = HINT_MORE.match(line)
            if more:
                hint = f"{hint} {more.group('text')}".strip()
            else:  # the hint ends where the solution's code starts
                out += _raise_lines(indent, hint or DEFAULT_HINT)
                hint = None
    if region is not None:
        raise RegionError(f"{where}: the region opened on line {region} has no END SOLUTION")
    stubbed = "\n".join(out)
    _check_raises_inside_functions(stubbed, where)
    return stubbed


def _check_raises_inside_functions(source: str, where: str) -> None:
    """Every stub `raise` must be in a function body, or the exercise cell itself fails."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise RegionError(f"{where}: the stubbed code does not parse ({error.msg}, line "
                          f"{error.lineno}); a region must hold whole statements") from None
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Raise) and id(node) not in inside
                and "NotImplementedError" in ast.unparse(node)):
            raise RegionError(f"{where}, line {node.lineno}: a region outside a function "
                              "body; move it into a function (or a method) that a check "
                              "cell calls")


def _has_region(source: str) -> bool:
    return any(BEGIN.match(line) for line in source.splitlines())


def exercise_from_solution(solution_path: Path):
    """The exercise notebook for the solution at `solution_path`."""
    notebook = copy.deepcopy(nbformat.read(solution_path, as_version=4))
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        where = f"{solution_path.name}, cell {index}"
        if _has_region(cell.source) and EXERCISE_TAG not in tags:
            raise RegionError(f"{where}: has a SOLUTION region but no '{EXERCISE_TAG}' tag")
        cell.source = stub_source(cell.source, where)
        cell.outputs = []
        cell.execution_count = None
    target = EXERCISES / solution_path.name
    return notebooks.synced_notebook(notebook, target)


def solution_paths() -> list[Path]:
    return sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))


def generate() -> None:
    EXERCISES.mkdir(exist_ok=True)
    for path in solution_paths():
        notebooks.write(exercise_from_solution(path), EXERCISES / path.name)
        print(f"wrote exercises/{path.name}")


def stale() -> list[str]:
    """Exercises that differ from what `generate` would write now (or are missing/extra)."""
    found = []
    wanted = {path.name for path in solution_paths()}
    for path in solution_paths():
        target = EXERCISES / path.name
        text = nbformat.writes(exercise_from_solution(path))
        if not target.is_file():
            found.append(f"exercises/{path.name} is missing")
        elif target.read_text().rstrip("\n") != text.rstrip("\n"):
            found.append(f"exercises/{path.name} differs from its solution's stubs")
    found += [f"exercises/{path.name} has no solution in solutions/"
              for path in sorted(EXERCISES.glob("[0-9][0-9]_*.ipynb"))
              if path.name not in wanted]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["generate", "check"])
    arguments = parser.parse_args(argv)
    if arguments.command == "generate":
        generate()
        return 0
    found = stale()
    print("\n".join(found) if found else "exercises/ matches solutions/.")
    if found:
        print("Run `make exercises` to regenerate them.")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
