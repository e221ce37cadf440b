"""Every lesson and every solution runs top to bottom the way Run All runs it.

Each notebook is executed with nbclient and `allow_errors=False`, which is what
`jupyter nbconvert --to notebook --execute` does and what Run All in JupyterLab, Colab and
VS Code amounts to: the first cell that ends in an error stops the run and fails the test. A
cell that demonstrates an error must catch it with `course.must_raise`, which prints the
traceback and lets the cell succeed. The notebooks run in fast mode (conftest.py), on a copy:
the committed file is never written. Cells whose first line is `# NBVAL_CHECK_OUTPUT` must
print what the committed run printed, after the replacements in `sanitize.cfg` beside this
file (memory addresses, temporary paths).

`COURSE_NOTEBOOKS="notebooks/01_the_bottleneck.ipynb ..."` limits the run to those notebooks
(`make colab-check` uses it).
"""

from __future__ import annotations

import configparser
import copy
import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = "# NBVAL_CHECK_OUTPUT"
CELL_TIMEOUT_S = 240


def notebooks_to_run() -> list[Path]:
    named = os.environ.get("COURSE_NOTEBOOKS", "").split()
    if named:
        return [ROOT / name for name in named]
    return [path for folder in ("notebooks", "solutions")
            for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]


def replacements() -> list[tuple[re.Pattern, str]]:
    parser = configparser.ConfigParser()
    parser.read(Path(__file__).with_name("sanitize.cfg"))
    return [(re.compile(parser[section]["regex"]), parser[section]["replace"])
            for section in parser.sections()]


def printed_text(cell, rules: list[tuple[re.Pattern, str]]) -> str:
    """What a checked cell printed to stdout and displayed as text, sanitized.

    stderr is left out: warnings and progress bars are not part of what a cell proves."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == "stdout":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(output.get("data", {}).get("text/plain", ""))
    text = "".join(parts)
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def _first_line(cell) -> str:
    return cell.source.splitlines()[0].strip() if cell.source else ""


@pytest.mark.parametrize("path", notebooks_to_run(),
                         ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_notebook_runs_every_cell_without_an_error(path):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    committed = nbformat.read(path, as_version=4)
    notebook = copy.deepcopy(committed)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            allow_errors=False, resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name}: Run All stops here, as it would in JupyterLab or Colab:\n"
                    f"{error}", pytrace=False)
    rules = replacements()
    for index, (before, after) in enumerate(zip(committed.cells, notebook.cells, strict=True)):
        if before.cell_type != "code" or _first_line(before) != CHECK:
            continue
        expected, found = printed_text(before, rules), printed_text(after, rules)
        assert found == expected, (
            f"{path.name}, cell {index} ({CHECK}) printed something else than the committed "
            f"run.\n--- committed:\n{expected}\n--- now:\n{found}\n"
            "Fix the cell so it prints only what is the same on every run, or re-execute the "
            "notebook (`make notebooks`) if the change is meant.")
