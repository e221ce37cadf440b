"""Run every notebook on Colab's stack, installed the way the notebooks' setup cell does it.

Colab ships Python 3.12, jax and jaxlib 0.7.2, flax 0.11.2, optax 0.2.8 and numpy 2.x, and
no chex. This script builds that stack in its own environment (`.colab-venv/`, kept between
runs), then runs the setup cell of a notebook there as Colab would (with `google.colab`
present), except that the package comes from this checkout instead of GitHub. It checks
that the setup cell upgraded none of Colab's packages, then validates every lesson and every
solution of the exercises in fast mode with nbval, as `make test` does (`pytest --nbval-lax
--nbval-sanitize-with tests/sanitize.cfg`: every cell must run without an error, as Run All
needs, and the cells marked `# NBVAL_CHECK_OUTPUT` must print what was committed), in a
kernel of the Colab environment (`--nbval-current-env`).

    python tools/colab_check.py [NOTEBOOKS...]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import notebooks as notebook_tool

ROOT = notebook_tool.ROOT
VENV = ROOT / ".colab-venv"
COLAB_STACK = {"jax": "0.7.2", "jaxlib": "0.7.2", "flax": "0.11.2", "optax": "0.2.8",
               "numpy": "2.0.2"}
# What Colab also ships that the notebooks' kernel and the check itself need.
COLAB_EXTRAS = ["ipykernel", "matplotlib", "scikit-learn", "pillow", "tqdm"]
CHECK_TOOLS = ["pytest", "pytest-timeout", "nbval>=0.11", "nbformat"]


def _python_312() -> str:
    """A Python 3.12 (or 3.13) that really runs: a pyenv shim can exist and still fail."""
    for candidate in (os.environ.get("COLAB_PYTHON"),
                      str(Path.home() / ".pyenv/versions/3.12.1/bin/python"),
                      shutil.which("python3.12"), shutil.which("python3.13")):
        if candidate and Path(candidate).exists() and subprocess.run(
                [candidate, "--version"], capture_output=True, check=False).returncode == 0:
            return candidate
    raise SystemExit("No Python 3.12 (or 3.13) found: set COLAB_PYTHON=/path/to/python3.12.")


def _run(*command: str, **kwargs) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def _versions(python: Path) -> dict[str, str]:
    script = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) "
              f"for n in {list(COLAB_STACK)!r}}}))")
    output = subprocess.run([str(python), "-c", script], check=True, capture_output=True,
                            text=True).stdout
    return json.loads(output)


def build_stack() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        _run(_python_312(), "-m", "venv", str(VENV))
        _run(str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    pins = [f"{name}=={version}" for name, version in COLAB_STACK.items()]
    _run(str(python), "-m", "pip", "install", "--quiet", *pins, *COLAB_EXTRAS, *CHECK_TOOLS)
    subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "chex",
                    "feed-the-beast"], check=False)
    return python


def run_setup_cell(python: Path, notebook_name: str = "") -> None:
    """The generated setup cell of the notebook named `notebook_name` (its stem), with
    `google.colab` present and this checkout as source."""
    source = notebook_tool.setup_cell_source(notebook_name)
    spec = notebook_tool.install_spec()
    if spec not in source:
        raise SystemExit("the setup cell no longer installs the package spec; update this check")
    source = source.replace(spec, str(ROOT))
    prelude = "import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')\n"
    _run(str(python), "-c", prelude + source, cwd="/")


def main(arguments: list[str]) -> int:
    python = build_stack()
    targets = arguments or [str(path.relative_to(ROOT)) for folder in ("notebooks", "solutions")
                            for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]
    # One setup cell per distinct list of packages: a lesson that needs more installs more.
    setups = {notebook_tool.setup_cell_source(Path(target).stem): Path(target).stem
              for target in targets}
    for name in setups.values():
        run_setup_cell(python, name)
    versions = _versions(python)
    changed = {name: version for name, version in versions.items()
               if version != COLAB_STACK[name]}
    if changed:
        raise SystemExit(f"the setup cell changed Colab's packages: {changed}")
    print(f"Colab stack kept after the setup cell: {versions}", flush=True)
    environment = {**os.environ, "COURSE_FAST": "1"}
    environment.pop("PYTHONPATH", None)
    # Run from a copy of the notebooks outside the checkout, so `import course_lib` finds
    # the installed package, as on Colab, and not the folder next to the notebooks.
    work = ROOT / ".colab-venv" / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("conftest.py", "pyproject.toml", "tests/sanitize.cfg"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, work / name)
    for target in targets:
        destination = work / target
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / target, destination)
    completed = subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                "--nbval-lax", "--nbval-sanitize-with", "tests/sanitize.cfg",
                                *targets], cwd=work, env=environment, check=False)
    return completed.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
