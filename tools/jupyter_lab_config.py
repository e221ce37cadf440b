"""JupyterLab settings for `make lab`: the course opens at the repository's root, where the
lessons (notebooks/), the exercises and their solutions and course_lib are all reachable, and
the file browser hides what is there for building and testing the course, not for taking it.

The course's defaults for JupyterLab's own settings live in `lab_settings/overrides.json`,
next to this file: the news feed is off (`fetchNews`), so an offline course machine does not
open with the "get notified about official Jupyter news?" prompt, nor check for updates. A
learner's own settings (Settings > Settings Editor) still win over these defaults."""

from pathlib import Path

c = get_config()  # noqa: F821 (Jupyter's config loader defines get_config)

c.ContentsManager.hide_globs = [
    "__pycache__", "*.pyc", "*.egg-info", "*.so", "*~",
    "tests", "tools", "benchmarks", "conftest.py", "pyproject.toml", "Makefile",
    "environment.yml",
]

# JupyterLab reads `overrides.json` from its application settings folder.
c.LabApp.app_settings_dir = str(Path(__file__).resolve().parent / "lab_settings")
