"""What importing course_lib costs: a worker process imports only what it runs.

The fork server (or, where there is none, each worker started with spawn) is a fresh
interpreter that imports the worker code before any worker can read a record, so every module
it imports is paid for with the time to the first batch of the first `iter()`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import course_lib


def _modules_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True, timeout=120)
    return set(json.loads(completed.stdout.splitlines()[-1]))


@pytest.mark.timeout(180)
def test_a_worker_imports_neither_the_loader_nor_jax_pillow_or_matplotlib():
    imported = _modules_after("import course_lib.worker_process, course_lib.augment")
    unwanted = {"course_lib.loader", "course_lib.workers", "course_lib.state",
                "course_lib.allocator", "PIL", "jax", "matplotlib", "ctypes.util"}
    assert imported & unwanted == set()


@pytest.mark.timeout(180)
def test_the_public_names_and_submodules_still_resolve_on_first_use():
    imported = _modules_after(
        "import course_lib\n"
        "assert course_lib.DataLoader.__module__ == 'course_lib.loader'\n"
        "assert course_lib.workers.WorkerError is course_lib.WorkerError\n"
        "from course_lib import load, DataLoaderIterator, PadAndMask")
    assert {"course_lib.loader", "course_lib.workers", "course_lib.padding"} <= imported
    assert "jax" not in imported


def test_an_unknown_name_is_an_attribute_error():
    import course_lib

    with pytest.raises(AttributeError, match="no attribute 'DataLoadr'"):
        course_lib.DataLoadr  # noqa: B018


def _engine_imports() -> dict[str, set[str]]:
    """For each module directly in `course_lib/`, the modules beside it that it imports when
    it is imported: module-level imports, not those inside a function (made on first use)
    nor under `if TYPE_CHECKING:` (never run)."""
    package = Path(course_lib.__file__).parent
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        imported: set[str] = set()
        for statement in tree.body:
            if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    break  # a function body runs when called, not on import
                if isinstance(node, ast.ImportFrom) and node.module == "course_lib":
                    imported |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "course_lib."):
                    imported.add(node.module.split(".")[1])
                elif isinstance(node, ast.Import):
                    imported |= {alias.name.split(".")[1] for alias in node.names
                                 if alias.name.startswith("course_lib.")}
        graph[name] = imported & modules
    return graph


def test_the_engine_modules_import_top_down_with_no_circle():
    """A learner reads the engine from the bottom up (`_checks`, `closing`, `record_stage`,
    `stream`, `loader`): no module may import, even through others, a module that imports
    it."""
    graph = _engine_imports()
    assert graph["closing"] == set()  # the one exit registry is a leaf
    # the per-record stage sits under the loader, with the exit registry under it
    assert graph["record_stage"] == {"_checks", "closing"}
    assert {"loader", "worker_process"} <= {
        name for name, imported in graph.items() if "record_stage" in imported}
    assert "record_stage" not in graph["stream"]  # stream only cuts chunks: a leaf
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(name):],
                                                                  name]))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
