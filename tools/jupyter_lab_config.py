"""JupyterLab settings for `make lab`: the course opens at the repository's root, where the
lessons (notebooks/), the exercises and their solutions and course_lib are all reachable, and
the file browser hides what is there for building and testing the course, not for taking it."""

c = get_config()  # noqa: F821 (Jupyter's config loader defines get_config)

c.ContentsManager.hide_globs = [
    "__pycache__", "*.pyc", "*.egg-info", "*.so", "*~",
    "tests", "tools", "benchmarks", "conftest.py", "pyproject.toml", "Makefile",
    "environment.yml",
]
