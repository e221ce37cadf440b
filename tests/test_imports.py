"""What importing course_lib costs: a worker process imports only what it runs.

The fork server (or, where there is none, each worker started with spawn) is a fresh
interpreter that imports the worker code before any worker can read a record, so every module
it imports is paid for with the time to the first batch of the first `iter()`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


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
