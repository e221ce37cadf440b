"""Notebooks under `make test` leave nothing in /dev/shm: their kernels shut down, not killed.

A kernel that holds a multiprocessing lock from the spawn context (a named semaphore, as a
library's worker pool holds them) is run under nbval the way `make test` runs a lesson; once
pytest returns, the semaphore must be gone. With nbval's own kill it stays (the resource
tracker that would remove it dies with the kernel's process group). The notebook lives outside
the course, so the course's `conftest.py` is loaded by name (`-p conftest`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOLD_A_SEMAPHORE = """\
import multiprocessing
lock = multiprocessing.get_context("spawn").Lock()  # kept until the kernel exits
open(NAME_FILE, "w").write(lock._semlock.name)
"""


def notebook(source: str) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "id": "hold", "metadata": {},
            "outputs": [], "source": source}
    return {"cells": [cell], "metadata": {"kernelspec": {"name": "python3",
                                                          "display_name": "Python 3",
                                                          "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="named semaphores live in /dev/shm")
def test_a_notebook_kernel_releases_its_named_semaphores_when_nbval_stops_it(tmp_path):
    name_file = tmp_path / "semaphore-name.txt"
    source = f"NAME_FILE = {str(name_file)!r}\n" + HOLD_A_SEMAPHORE
    path = tmp_path / "holds_a_semaphore.ipynb"
    path.write_text(json.dumps(notebook(source)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-q",
         "--nbval-lax", "-c", str(ROOT / "pyproject.toml"), str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    name = name_file.read_text().strip("/")
    left = Path("/dev/shm") / f"sem.{name}"
    assert not left.exists(), (
        f"{left} is still there after the notebook's kernel stopped: the kernel was killed "
        "before its exit handlers ran (see pytest_configure in conftest.py)")
