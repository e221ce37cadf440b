"""Keep the course notebooks consistent: headers, setup cells, clean metadata, execution.

The repository's address and branch are declared once, as `Source` under `[project.urls]`
in pyproject.toml (`https://github.com/OWNER/REPO/tree/BRANCH`). From it this script writes
every notebook's "Open in Colab" and "View source" badges and its Colab setup cell, so a
fork changes one line and runs `make sync-notebooks`.

    python tools/notebooks.py sync [PATHS]      rewrite badges, setup cells and metadata
    python tools/notebooks.py check [PATHS]     list what `sync` would change (exit 1 if any)
    python tools/notebooks.py execute [PATHS]   run lessons in place, in full mode, as Run All
    python tools/notebooks.py portable [PATHS]  rewrite this machine's paths in the outputs
                                                and drop blank (cleared progress bar) outputs
    python tools/notebooks.py from-percent SRC DST   build a notebook from a `# %%` script

A notebook's first cell is Markdown: a `# Title` line, the badge line, then the text. Its
second cell is the setup cell, which this script owns entirely.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")
BADGE_PREFIX = "[![Open In Colab]"
SETUP_MARKER = "# Colab setup"
PACKAGE = "feed-the-beast"
KEPT_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy")
EXTRA_PACKAGES = ("chex",)
# What one notebook needs beyond that on Colab, by the notebook's file stem.
NOTEBOOK_EXTRAS = {
    "09_bigger_than_memory": ("array_record",),
    "07_sharded_files": ("array_record",),
    "11_moving_to_grain": ("grain==0.2.18",),
    "12_capstone": ("array_record",),
    "13_mixing_data_sets": ("grain==0.2.18",),
}
_SOURCE_URL = re.compile(r"^https://github\.com/([^/]+)/([^/]+)/tree/(.+)$")


def repository() -> tuple[str, str, str]:
    """(owner, name, branch) from `[project.urls] Source` in pyproject.toml."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    match = _SOURCE_URL.match(urls.get("Source", ""))
    if match is None:
        raise SystemExit(
            "pyproject.toml needs [project.urls] Source = "
            "\"https://github.com/OWNER/REPO/tree/BRANCH\"; got "
            f"{urls.get('Source')!r}.")
    return match.group(1), match.group(2), match.group(3)


def badge_line(relative_path: str) -> str:
    owner, name, branch = repository()
    colab = (f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch}/"
             f"{relative_path}")
    source = f"https://github.com/{owner}/{name}/blob/{branch}/{relative_path}"
    return (f"{BADGE_PREFIX}(https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab}) "
            f"[![View source](https://img.shields.io/badge/view-source-black?logo=github)]"
            f"({source})")


def install_spec() -> str:
    owner, name, branch = repository()
    return f"{PACKAGE} @ git+https://github.com/{owner}/{name}@{branch}"


def setup_cell_source(notebook_name: str = "") -> str:
    """The setup cell of the notebook whose file stem is `notebook_name`."""
    kept = ", ".join(f'"{package}"' for package in KEPT_PACKAGES)
    needed = (*EXTRA_PACKAGES, *NOTEBOOK_EXTRAS.get(notebook_name, ()))
    extras = ", ".join(f'"{package}"' for package in needed)
    installs, keeps = " and ".join(needed), ", ".join(KEPT_PACKAGES)
    return f'''# NBVAL_SKIP
{SETUP_MARKER}: install course_lib and {installs};
# keep the {keeps} that Colab ships (pinned to the installed
# versions, so nothing is upgraded). Elsewhere: nothing.
import sys

if "google.colab" in sys.modules:
    import importlib.metadata
    import subprocess

    colab_ships = ({kept})
    keep = [f"{{name}}=={{importlib.metadata.version(name)}}" for name in colab_ships]
    package = "{install_spec()}"
    extras = [{extras}]
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", package, *extras, *keep],
                   check=True)'''


# -- the rules every notebook follows ------------------------------------------------------
def _relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def _clean_metadata(notebook) -> None:
    """Only the kernelspec and language info stay: no Colab, VS Code or widget state."""
    notebook.metadata = nbformat.from_dict({
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    for cell in notebook.cells:
        tags = cell.get("metadata", {}).get("tags")
        cell.metadata = nbformat.from_dict({"tags": tags} if tags else {})


def synced(path: Path):
    """The notebook at `path` with its badges, setup cell and metadata as they must be."""
    return synced_notebook(nbformat.read(path, as_version=4), path)


def synced_notebook(notebook, path: Path):
    """`notebook`, which lives (or will live) at `path`, with badges, setup cell and
    metadata as they must be."""
    if len(notebook.cells) < 2 or notebook.cells[0].cell_type != "markdown":
        raise SystemExit(f"{path}: the first cell must be the Markdown header.")
    header = notebook.cells[0].source.splitlines()
    if not header or not header[0].startswith("# "):
        raise SystemExit(f"{path}: the header must start with a '# Title' line.")
    rest = [line for line in header[1:] if not line.startswith(BADGE_PREFIX)]
    notebook.cells[0].source = "\n".join([header[0], "", badge_line(_relative(path)),
                                          *_drop_leading_blank(rest)])
    setup = nbformat.v4.new_code_cell(setup_cell_source(path.stem))
    second = notebook.cells[1]
    if second.cell_type == "code" and SETUP_MARKER in second.source:
        setup.id = second.get("id", setup.id)  # keep the id: no churn in diffs
        notebook.cells[1] = setup
    else:
        notebook.cells.insert(1, setup)
    _clean_metadata(notebook)
    return notebook


def _drop_leading_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    return ["", *lines] if lines else []


def problems(path: Path) -> list[str]:
    """What `sync` would change in the notebook at `path`, as readable lines."""
    current = nbformat.read(path, as_version=4)
    wanted = synced(path)
    found = []
    if current.cells[0].source != wanted.cells[0].source:
        found.append(f"{path}: header badges differ from pyproject.toml's Source URL")
    if current.cells[1].source != wanted.cells[1].source:
        found.append(f"{path}: the Colab setup cell differs from the one generated")
    if dict(current.metadata) != dict(wanted.metadata):
        found.append(f"{path}: notebook metadata has editor noise {sorted(current.metadata)}")
    for index, (have, want) in enumerate(zip(current.cells, wanted.cells, strict=False)):
        if dict(have.get("metadata", {})) != dict(want.get("metadata", {})):
            found.append(f"{path}: cell {index} metadata has editor noise")
            break
    return found


def write(notebook, path: Path) -> None:
    nbformat.validate(notebook)
    text = nbformat.writes(notebook)
    path.write_text(text if text.endswith("\n") else text + "\n")


# -- commands --------------------------------------------------------------------------------
def notebook_paths(arguments: list[str]) -> list[Path]:
    if arguments:
        return [Path(argument) for argument in arguments]
    return sorted(path for folder in NOTEBOOK_FOLDERS
                  for path in (ROOT / folder).glob("*.ipynb"))


def sync(paths: list[Path]) -> None:
    for path in paths:
        write(synced(path), path)


def check(paths: list[Path]) -> int:
    found = [line for path in paths for line in problems(path)]
    print("\n".join(found) or f"{len(paths)} notebooks agree with pyproject.toml.")
    return 1 if found else 0


def execute(paths: list[Path], timeout: int = 600) -> None:
    """Run each notebook top to bottom in full mode and save it with its outputs.

    It runs as Run All does: `allow_errors=False`, so the first cell that fails stops here
    and the notebook on disk is left as it was (a cell that demonstrates an error catches it
    with `course.must_raise`). Paths of this machine in the outputs are written relative to
    the course (`portable_text`), so a reader on GitHub sees `course_lib/pipeline.py`."""
    import time

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ.pop("COURSE_FAST", None)
    for path in paths:
        notebook = synced(path)
        print(f"executing {_relative(path)} ...", flush=True)
        start = time.perf_counter()
        # coalesce_streams folds a progress bar's carriage-return updates into its last state.
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                allow_errors=False, coalesce_streams=True,
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        except CellExecutionError as error:
            raise SystemExit(f"{path}: a cell failed, so Run All would stop there:\n{error}") \
                from None
        make_outputs_portable(notebook)
        drop_blank_streams(notebook)
        _clean_metadata(notebook)
        write(notebook, path)
        print(f"  done in {time.perf_counter() - start:.0f} s", flush=True)


def _machine_paths() -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) pairs, most specific first, for paths of this machine."""
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    pairs = [
        (r"/tmp/ipykernel_\d+/\d+\.py", "<cell>"),
        (r"(?:/[^\s'\"():]+)?/(?:lib/python3\.\d+/)?site-packages/", "site-packages/"),
        (re.escape(str(ROOT)) + "/", ""),
        (re.escape(str(ROOT)), "."),
        (re.escape(str(stdlib)) + "/", f"<python{stdlib.name[len('python'):]}>/"),
        (re.escape(str(Path.home())) + "/", "~/"),
        (r"/tmp/[^\s'\",)\]]+", "<temporary path>"),
    ]
    return [(re.compile(pattern), replacement) for pattern, replacement in pairs]


def portable_text(text: str) -> str:
    """`text` with this machine's paths written relative to the course, the home folder,
    the Python installation or a temporary folder."""
    for pattern, replacement in _machine_paths():
        text = pattern.sub(replacement, text)
    return text


def make_outputs_portable(notebook) -> None:
    """Rewrite every text output of `notebook` with `portable_text`, in place."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                output["text"] = portable_text(output["text"])
            elif output.get("output_type") == "error":
                output["traceback"] = [portable_text(line) for line in output["traceback"]]
            for kind, value in output.get("data", {}).items():
                if kind.startswith("text/") and isinstance(value, str):
                    output["data"][kind] = portable_text(value)


def drop_blank_streams(notebook) -> None:
    """Remove, in place, every stream output whose text is only blanks: what a progress bar
    leaves when it clears its line at the end (spaces and carriage returns), which a reader
    would see as an empty output box. A cell marked `# NBVAL_CHECK_OUTPUT` keeps its
    streams: nbval compares which kinds of output a checked cell prints, so the progress
    bar's stderr must stay in the committed outputs for the check to pass."""
    for cell in notebook.cells:
        if "outputs" in cell and "NBVAL_CHECK_OUTPUT" not in cell.get("source", ""):
            cell["outputs"] = [output for output in cell["outputs"]
                               if output.get("output_type") != "stream"
                               or output.get("text", "").strip()]


def from_percent(source: Path, target: Path) -> None:
    """Build a notebook from a script of `# %%` (code) and `# %% [markdown]` cells.

    A cell line may carry tags: `# %% tags=["exercise"]`."""
    cells, kind, tags, lines = [], None, [], []

    def flush():
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in text.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(text))
        elif kind == "code" and text:
            cell = nbformat.v4.new_code_cell(text)
            if tags:
                cell.metadata["tags"] = tags
            cells.append(cell)

    for line in source.read_text().splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
            found = re.search(r"tags=\[([^\]]*)\]", line)
            tags = re.findall(r'"([^"]+)"', found.group(1)) if found else []
        elif kind is not None:
            lines.append(line)
    flush()
    notebook = nbformat.v4.new_notebook(cells=cells)
    target.parent.mkdir(parents=True, exist_ok=True)
    write(notebook, target)
    write(synced(target), target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command",
                        choices=["sync", "check", "execute", "portable", "from-percent"])
    parser.add_argument("paths", nargs="*")
    arguments = parser.parse_args(argv)
    if arguments.command == "from-percent":
        if len(arguments.paths) != 2:
            parser.error("from-percent takes SOURCE.py TARGET.ipynb")
        from_percent(Path(arguments.paths[0]), Path(arguments.paths[1]))
        return 0
    paths = notebook_paths(arguments.paths)
    if arguments.command == "sync":
        sync(paths)
    elif arguments.command == "check":
        return check(paths)
    elif arguments.command == "portable":
        for path in paths:
            notebook = nbformat.read(path, as_version=4)
            make_outputs_portable(notebook)
            drop_blank_streams(notebook)
            write(notebook, path)
    else:
        execute(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
