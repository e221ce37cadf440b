"""The program the grader sends into the learner's kernel to run one check cell.

It is never imported by the grader: `channel.py` sends this file's text, with the values of
one check, in the execute request's `user_expressions`, which IPython evaluates without its
input transformers, AST transformers, custom exception handler or traceback display. It:

1. loads `course_lib.checks` afresh from the package's own source files, under a finder of
   its own (no cached `.pyc`, not the module objects the learner's cells can reach and
   patch), and puts the learner's modules back once the check is over;
2. runs the released check cell's source with `checks` bound to that fresh package;
3. writes what happened (passed, or the exception's type and message) to the one-time
   result file the grader named, sealed with an HMAC under the one-time key it chose.

A result that does not come back this way, sealed with the right key, counts as a failure.
"""

import contextlib
import hashlib
import hmac
import importlib
import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path

PACKAGE = "course_lib.checks"


class FreshChecks(importlib.abc.MetaPathFinder, importlib.abc.SourceLoader):
    """Finds `course_lib.checks` and its modules in `folder` and compiles each from source."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def _file(self, name: str) -> Path | None:
        if name == PACKAGE:
            return self.folder / "__init__.py"
        head, _, tail = name.rpartition(".")
        return self.folder / f"{tail}.py" if head == PACKAGE else None

    def find_spec(self, name, path=None, target=None):
        file = self._file(name)
        if file is None or not file.is_file():
            return None
        search = [str(self.folder)] if name == PACKAGE else None
        return importlib.util.spec_from_file_location(name, file, loader=self,
                                                      submodule_search_locations=search)

    def get_filename(self, name):
        return str(self._file(name))

    def get_data(self, path):
        return Path(path).read_bytes()


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


@contextlib.contextmanager
def fresh_checks(folder: str):
    """A private copy of `course_lib.checks`, in `sys.modules` only while the check runs.

    An `import` inside the check cell or the check code gets the fresh copy too; afterwards
    the learner's modules (patched or not) are put back as they were.
    """
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _ours(name)}
    parent = importlib.import_module("course_lib")
    missing = object()
    attribute = parent.__dict__.get("checks", missing)
    finder = FreshChecks(folder)
    sys.meta_path.insert(0, finder)
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.meta_path.remove(finder)
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if attribute is missing:
            parent.__dict__.pop("checks", None)
        else:
            parent.checks = attribute


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<{type(error).__name__} whose message could not be read>"


def run_check(params: dict, user_ns: dict) -> None:
    """Run one check cell and write its sealed outcome to `params["result"]`."""
    outcome = {}
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(params["source"])
        code = compile(source, f"<check cell {params['cell']}>", "exec")
        missing = object()
        learners = user_ns.get("checks", missing)
        with fresh_checks(params["checks"]) as checks:
            user_ns["checks"] = checks
            try:
                exec(code, user_ns)
            finally:
                if learners is missing:
                    user_ns.pop("checks", None)
                else:
                    user_ns["checks"] = learners
        outcome = {"ok": True}
    except BaseException as error:  # the verdict is the exception itself, whatever it is
        outcome = {"ok": False, "ename": type(error).__name__, "evalue": _text(error)}
    payload = json.dumps({"nonce": params["nonce"], "cell": params["cell"], **outcome})
    seal = hmac.new(params["key"].encode(), payload.encode(), hashlib.sha256).hexdigest()
    Path(params["result"]).write_text(payload + "\n" + seal)


if __name__ == "__grade_check__":  # sent by channel.py, which gives PARAMS and USER_NS
    run_check(PARAMS, USER_NS)  # noqa: F821
