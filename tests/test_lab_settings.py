"""`make lab`'s JupyterLab settings: the course's defaults reach JupyterLab's own settings.

An offline course machine must not open with JupyterLab's "Would you like to get notified
about official Jupyter news?" prompt: the news check is off in the settings JupyterLab reads
(`tools/lab_settings/overrides.json`, through `tools/jupyter_lab_config.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIG = Path(__file__).resolve().parent.parent / "tools" / "jupyter_lab_config.py"
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def _lab_config():
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(CONFIG.name, path=str(CONFIG.parent)).load_config()


def test_the_lab_config_points_jupyterlab_at_the_course_settings_folder():
    pytest.importorskip("traitlets")
    config = _lab_config()
    folder = Path(config.LabApp.app_settings_dir)
    assert folder == CONFIG.parent / "lab_settings" and (folder / "overrides.json").is_file()
    assert "tests" in config.ContentsManager.hide_globs


def test_jupyterlab_reads_the_news_check_as_off():
    pytest.importorskip("jupyterlab")
    from jupyterlab.commands import get_app_dir
    from jupyterlab_server.settings_utils import _get_overrides, get_settings

    settings_folder = _lab_config().LabApp.app_settings_dir
    overrides, error = _get_overrides(settings_folder)
    assert error == ""
    schemas = Path(get_app_dir()) / "schemas"
    result, _ = get_settings(settings_folder, str(schemas), str(schemas / "no-user-settings"),
                             NOTIFICATION, overrides)
    properties = result["schema"]["properties"]
    # "false" is JupyterLab's "Never" (the default "none" means "Ask", the prompt).
    assert properties["fetchNews"]["default"] == "false"
    assert "false" in [choice["const"] for choice in properties["fetchNews"]["oneOf"]]
    assert properties["checkForUpdates"]["default"] is False
