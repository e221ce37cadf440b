"""Run Grain's own tests against course_lib, with only their imports changed.

    .venv/bin/python tools/grain_tests.py dataset/elastic_iterator_test.py \
        dataset/transformations/zip_test.py

Each named file (a path under `grain/_src/python/` of the installed Grain) is copied to a
temporary folder, and every import of a Grain module in it (`from grain._src... import x`,
`import grain.python as grain`, ...) becomes an import of one module, `_grain_names`, which
holds every public name of course_lib's modules. Nothing else in the file changes, so a test
that uses a name course_lib lacks fails on it: such a name is a stand-in class that refuses to
be built, so the file still collects and only the tests that use the name fail. A bare
`import grain` stays: Grain's tests use it only to find their test data inside the installed
package. So does an import of Grain's tree utility, `grain._src.core.tree_lib`: the tests use
it to compare nested results, it is no name of the Dataset API, and course_lib has no public
one like it. Grain's test helper `testing_util`, where the packing tests' classes live, is
copied beside the test and rewritten the same way.

pytest then runs the copy (30 s per test), and the script prints one line per file, the
counts the README's table "Grain's own tests of the Dataset API" gives. `--show` also prints
each failing test's last error line, to sort the failures into out of scope and differences.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import grain

GRAIN_TESTS = Path(grain.__file__).parent / "_src" / "python"

# The modules whose public names `_grain_names` holds, the first one to define a name wins.
COURSE_MODULES = [
    "course_lib", "course_lib.experimental", "course_lib.transforms", "course_lib.sources",
    "course_lib.sharding", "course_lib.samplers", "course_lib.dataset",
    "course_lib.iter_dataset", "course_lib.dataset_iterator", "course_lib.iter_shapes",
    "course_lib.record_readers", "course_lib.elastic", "course_lib.resume_check",
]

NAMES_MODULE = '''"""Every public name of course_lib's modules (tools/grain_tests.py)."""
import importlib

import course_lib

MODULES = {modules!r}
for _module_name in MODULES:
    try:
        _module = importlib.import_module(_module_name)
    except ImportError:
        continue
    for _name in getattr(_module, "__all__", None) or dir(_module):
        if not _name.startswith("_") and _name not in globals():
            globals()[_name] = getattr(_module, _name)
from grain._src.core import tree_lib  # Grain's, as in the tests (some reload it)
experimental = importlib.import_module("course_lib.experimental")
transforms = importlib.import_module("course_lib.transforms")
sources = importlib.import_module("course_lib.sources")


class _Missing(type):
    """A name course_lib lacks: the test file still imports and collects, and the test
    that uses the name fails there, saying which name it was."""

    def __getattr__(cls, attribute):
        raise AttributeError(f"course_lib has no {{cls.__name__}}, so no .{{attribute}}")


def _refuse(self, *args, **kwargs):
    raise NotImplementedError(f"course_lib has no {{type(self).__name__}}")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(course_lib, name)
    except AttributeError:
        return _Missing(name, (), {{"__init__": _refuse}})
'''

CONFTEST = '''from absl import flags

flags.FLAGS.mark_as_parsed()
'''

# Grain's test helpers that hold test classes (the packing tests' bases): copied beside the
# test and rewritten like it, so that their tests run on course_lib too.
HELPERS = {"testing_util": "dataset/transformations/testing_util.py"}
# Grain modules a test keeps importing from Grain: helpers of the test, not the API tested.
# (`packing_packed_batch`: testing_util calls one pure function of it on the test's inputs.)
KEPT = re.compile(r"^\s*from grain\._src\.[\w.]+ import (tree_lib|packing_packed_batch)\s*(#.*)?$")
_FROM_GRAIN = re.compile(r"^(\s*)from (grain(?:\.[\w.]+)?) import \(?([\w\s,]+?)\)?\s*(#.*)?$")
_IMPORT_GRAIN_AS = re.compile(r"^(\s*)import grain\.[\w.]+ as (\w+)\s*(#.*)?$")


def _names(imported: str) -> list[tuple[str, str]]:
    """`a, b as c` -> each name imported and the name it is bound to: [(a, a), (b, c)]."""
    pairs = []
    for part in imported.split(","):
        words = part.split()
        if words:
            pairs.append((words[0], words[-1]))
    return pairs


def _is_module(package: str, name: str) -> bool:
    """Whether `from package import name` imports one of Grain's modules (not a name in it)."""
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError:
        return False


def _import(indent: str, package: str, name: str, bound: str) -> str:
    """A Grain module becomes `_grain_names` (a test helper module, its own rewritten copy);
    a name from one, that name of `_grain_names`."""
    if name in HELPERS:
        return f"{indent}import {name} as {bound}"
    if _is_module(package, name):
        return f"{indent}import _grain_names as {bound}"
    return f"{indent}from _grain_names import {name} as {bound}"


def rewrite(source: str) -> str:
    """The test file with every import of a Grain module pointed at `_grain_names`."""
    lines = source.splitlines()
    out = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if re.match(r"^\s*from grain[\w.]* import \($", line):  # a parenthesised import
            while not lines[index].rstrip().endswith(")"):
                index += 1
                line += " " + lines[index].strip()
        found = None if KEPT.match(line) else _FROM_GRAIN.match(line)
        if found:
            indent, package, imported = found.group(1), found.group(2), found.group(3)
            out.extend(_import(indent, package, name, bound) for name, bound in _names(imported))
        elif (found := _IMPORT_GRAIN_AS.match(line)) is not None:
            out.append(f"{found.group(1)}import _grain_names as {found.group(2)}")
        else:
            out.append(line)
        index += 1
    return "\n".join(out) + "\n"


def run(test_file: str, show: bool, workers: int) -> str:
    path = GRAIN_TESTS / test_file
    with tempfile.TemporaryDirectory(prefix="grain_tests_") as folder:
        folder = Path(folder)
        (folder / "_grain_names.py").write_text(NAMES_MODULE.format(modules=COURSE_MODULES))
        (folder / "conftest.py").write_text(CONFTEST)
        for helper, helper_path in HELPERS.items():
            source = (GRAIN_TESTS / helper_path).read_text(encoding="utf-8")
            (folder / f"{helper}.py").write_text(rewrite(source), encoding="utf-8")
        copy = folder / path.name
        copy.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   "--timeout=30", "-o", "addopts=", "-rfE", copy.name]
        if workers:
            command[3:3] = ["-n", str(workers)]  # right after "pytest"
        completed = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                                   check=False)
    lines = completed.stdout.strip().splitlines()
    summary = lines[-1] if lines else completed.stderr.strip()[-300:]
    if show:
        for line in lines:
            if line.startswith(("FAILED", "ERROR")):
                print("   ", line[:300])
    return f"{test_file}: {summary}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="+", help="paths under grain/_src/python/")
    parser.add_argument("--show", action="store_true", help="print each failure's error")
    parser.add_argument("-n", type=int, default=0, help="pytest-xdist workers (0: none)")
    arguments = parser.parse_args()
    for test_file in arguments.tests:
        print(run(test_file, arguments.show, arguments.n), flush=True)


if __name__ == "__main__":
    main()
