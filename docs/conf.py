"""Sphinx configuration of the course's website (`make site`).

The site is built from what is committed, without running anything: every lesson
(`notebooks/NN_*.ipynb`) with the outputs and figures of its full-mode run, every exercise
(`exercises/NN_*.ipynb`, the learner's version), pages cut from the README's sections, and
an API reference written by autodoc from `course_lib`'s docstrings.

Sphinx reads only files under its source folder (`docs/`), so before it looks for pages this
file copies the notebooks into `docs/notebooks/` and `docs/exercises/` and writes the README's
sections into `docs/readme/`; all three are generated and ignored by git. The notebooks are
found by glob, so a new lesson needs no change here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

# Which committed notebooks become pages (a lesson or exercise file starts with two digits).
NOTEBOOK_GLOBS = {"notebooks": "[0-9][0-9]_*.ipynb", "exercises": "[0-9][0-9]_*.ipynb"}
# README sections that become pages: page name -> (its title, the README heading it starts at,
# the README heading it stops before; None runs to the end).
README_PAGES = {
    "landing": ("Feed the Beast", "# Feed the Beast", "## Graded exercises"),
    "exercises": ("Graded exercises", "## Graded exercises", "## Grading a class"),
    "grading": ("Grading a class", "## Grading a class", "## Layout"),
    "differences": ("Where course_lib differs from Grain",
                    "## Where course_lib differs from Grain", None),
}
# A README anchor that is a page of its own on the site.
ANCHOR_PAGES = {
    "#where-course_lib-differs-from-grain": "readme/differences",
    "#graded-exercises-exercises": "readme/exercises",
    "#grading-a-class": "readme/grading",
}


def source_url() -> str:
    """`https://github.com/OWNER/REPO/tree/BRANCH`, from pyproject.toml's [project.urls]."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"]["Source"]


def copy_notebooks() -> None:
    """Mirror the committed lessons and exercises into docs/, keeping their times so that an
    unchanged notebook is not read again."""
    for folder, pattern in NOTEBOOK_GLOBS.items():
        target = DOCS / folder
        target.mkdir(exist_ok=True)
        wanted = {path.name: path for path in (ROOT / folder).glob(pattern)}
        for stale in target.glob("*.ipynb"):
            if stale.name not in wanted:
                stale.unlink()
        for name, path in wanted.items():
            copy = target / name
            if not copy.exists() or copy.stat().st_mtime != path.stat().st_mtime:
                # A lesson links a reference page as `../docs/inside/PAGE.md`, which is right
                # on GitHub; on the site the notebook sits one folder up from there.
                # The README's differences section is a page of its own on the site.
                text = path.read_text().replace("](../docs/", "](../").replace(
                    "](../README.md#where-course_lib-differs-from-grain)",
                    "](../readme/differences.md)")
                copy.write_text(text)
                shutil.copystat(path, copy)


def heading_line(lines: list[str], heading: str) -> int:
    """The number of the README line that starts with `heading` (a heading may go on, as
    "## Graded exercises (`exercises/`)" does)."""
    for number, line in enumerate(lines):
        if line == heading or line.startswith(heading + " "):
            return number
    raise ValueError(f"README.md has no heading {heading!r}; docs/conf.py's README_PAGES "
                     "names the headings that become pages: update it to the new heading.")


def readme_section(text: str, start: str, stop: str | None) -> str:
    """The README's lines from the heading `start` up to the heading `stop`."""
    lines = text.splitlines()
    last = heading_line(lines, stop) if stop is not None else len(lines)
    return "\n".join(lines[heading_line(lines, start):last]).strip() + "\n"


def rewrite_links(section: str, page_folder: str) -> str:
    """Point the README's relative links at the site's pages (a lesson, an exercise, another
    section), or at the file on GitHub when the site has no page for it."""
    source = source_url().replace("/tree/", "/blob/", 1)

    def replace(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if target.startswith(("http://", "https://", "mailto:")):
            return match.group(0)
        if target in ANCHOR_PAGES:
            return f"[{label}]({os.path.relpath(ANCHOR_PAGES[target], page_folder)}.md)"
        path = target.split("#", 1)[0]
        folder = path.split("/", 1)[0]
        if folder in NOTEBOOK_GLOBS and path.endswith(".ipynb"):
            return f"[{label}]({os.path.relpath(path, page_folder)})"
        return f"[{label}]({source}/{target})"

    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", replace, section)


def write_readme_pages() -> None:
    """Write docs/readme/<page>.md from README.md, one page per section of README_PAGES. The
    landing page's section keeps its `#` title; the others are raised one level, so that
    each page starts at `#`."""
    readme = (ROOT / "README.md").read_text()
    target = DOCS / "readme"
    target.mkdir(exist_ok=True)
    for page, (_title, start, stop) in README_PAGES.items():
        section = readme_section(readme, start, stop)
        if not start.startswith("# "):
            section = re.sub(r"^#(#+ )", r"\1", section, flags=re.MULTILINE)
        # The landing page is included by docs/index.md, so its links are relative to docs/.
        folder = "." if page == "landing" else "readme"
        text = rewrite_links(section, folder)
        path = target / f"{page}.md"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


copy_notebooks()
write_readme_pages()

project = "Feed the Beast"
author = "The Feed the Beast authors"
copyright = "The Feed the Beast authors, Apache-2.0"

# The docstrings are Google style ("Args:"), which napoleon turns into field lists.
extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_numpy_docstring = False
exclude_patterns = ["_build", "readme/landing.md", "**/.ipynb_checkpoints"]

# The committed notebooks are the full-mode run: show their outputs, run nothing.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# A lesson's heading levels are chosen for how they look in Jupyter; where one skips a level
# (H1 to H3) the site nests the section one level down instead of warning.
suppress_warnings = ["myst.header"]

# Every reference to a course_lib name must resolve; names of other libraries (NumPy, JAX)
# are not documented here, so only course_lib's are checked.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!course_lib\b).*")]

# autodoc imports course_lib; JAX and its family are mocked, which keeps the build from
# loading them (the reference shows their names as written in the annotations).
autodoc_mock_imports = ["jax", "jaxlib", "flax", "optax", "orbax", "chex"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": False}
# The docstrings are written for reading in the source, where `name` means code; show it so.
default_role = "code"

html_theme = "sphinx_book_theme"
html_title = "Feed the Beast"
html_theme_options = {
    "repository_url": source_url().split("/tree/", 1)[0],
    "repository_branch": source_url().split("/tree/", 1)[1],
    "use_repository_button": True,
    "show_toc_level": 2,
}
# The theme's script logs an error on a first visit unless a colour mode is named; "auto"
# follows the reader's system setting.
html_context = {"default_mode": "auto"}
html_static_path: list[str] = []
html_show_sourcelink = False
