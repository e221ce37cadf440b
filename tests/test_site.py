"""The course's website (`make site`) is built once for this module, as `make site` builds it
(`-W --keep-going`: any warning fails the build), into a temporary folder, and then read as a
reader would: every lesson and exercise has its page, every figure of a committed lesson is
an image on its page, every link between pages lands on a file and an anchor that exist, the
badges point at the repository of pyproject.toml, and no page names a path of this machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import course_lib

pytest.importorskip("sphinx", reason="the site needs the docs extra: make install brings it")
pytest.importorskip("myst_nb", reason="the site needs the docs extra: make install brings it")

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


class PageParser(HTMLParser):
    """The ids, links and images of one HTML page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        if tag == "a" and attributes.get("name"):
            self.ids.add(attributes["name"])
        for name in ("href", "src"):
            if attributes.get(name):
                self.links.append(attributes[name])
        if tag == "img" and attributes.get("src"):
            self.images.append(attributes["src"])


def parse(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Build the site once (in a child process, so that autodoc's mocks stay out of this one)."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
         "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert build.returncode == 0, (
        "`make site` fails or warns (it builds with -W); fix the source it names:\n"
        + build.stdout[-4000:] + build.stderr[-8000:])
    return out / "html"


def source_url() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]


def notebook_images(path: Path) -> int:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return sum(1 for cell in cells if cell["cell_type"] == "code"
               for output in cell.get("outputs", [])
               if any(kind in output.get("data", {}) for kind in IMAGE_TYPES))


def test_the_course_has_lessons_and_exercises_to_publish():
    assert len(LESSONS) >= 11 and len(EXERCISES) >= 8


@pytest.mark.parametrize("folder", ["notebooks", "exercises"])
def test_every_lesson_and_exercise_has_its_page(site, folder):
    committed = {path.stem for path in (ROOT / folder).glob("[0-9][0-9]_*.ipynb")}
    published = {path.stem for path in (site / folder).glob("*.html")}
    assert published == committed, (
        f"{folder}/: pages missing for {sorted(committed - published)}, "
        f"pages without a notebook: {sorted(published - committed)}")
    assert not (site / "solutions").exists(), "the solutions must not be published"


def test_every_figure_of_a_lesson_is_an_image_on_its_page(site):
    for lesson in LESSONS:
        page = site / "notebooks" / f"{lesson.stem}.html"
        figures = [src for src in parse(page).images if "_images/" in src]
        assert len(figures) == notebook_images(lesson), (
            f"{lesson.name} has {notebook_images(lesson)} figures, its page shows "
            f"{len(figures)}")
        for src in figures:
            assert (page.parent / unquote(src)).resolve().is_file(), f"{page.name}: {src}"


def test_no_internal_link_is_broken(site):
    pages = sorted(page for page in site.rglob("*.html")
                   if not page.relative_to(site).as_posix().startswith("_static/"))
    ids = {page.resolve(): parse(page).ids for page in pages}
    broken = []
    for page in pages:
        for link in parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and (
                    unquote(parts.fragment) not in ids.get(target, set())):
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken[:30])


def test_badges_open_the_notebook_in_colab_and_on_github(site):
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)/tree/(.+)", source_url())
    owner, name, branch = match.groups()
    for notebook in LESSONS + EXERCISES:
        relative = notebook.relative_to(ROOT).as_posix()
        links = parse(site / notebook.parent.name / f"{notebook.stem}.html").links
        colab = (f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch}/"
                 f"{relative}")
        github = f"https://github.com/{owner}/{name}/blob/{branch}/{relative}"
        assert colab in links, f"{relative}: no Colab badge to {colab}; run make sync-notebooks"
        assert github in links, f"{relative}: no source badge to {github}"


def test_the_landing_page_tells_the_story_and_links_every_guide(site):
    landing = site / "index.html"
    text = " ".join(re.sub(r"<[^>]+>", " ", landing.read_text(encoding="utf-8")).split())
    for words in ("A hands-on course", "make lab", "make test", "you will be able to"):
        assert words in text, f"the landing page lost the README's {words!r}"
    links = set(parse(landing).links)
    for page in ("notebooks/01_the_bottleneck.html", "readme/grading.html",
                 "readme/differences.html", "readme/exercises.html", "api.html"):
        assert page in links, f"the landing page does not link {page}"


def test_every_public_name_has_an_entry_in_the_api_reference(site):
    ids = parse(site / "api.html").ids
    missing = [name for name in course_lib.__all__ if f"course_lib.{name}" not in ids]
    assert not missing, f"add these public names to docs/api.md: {missing}"


def test_no_page_names_a_path_of_the_building_machine(site):
    machine_paths = {str(ROOT), str(Path.home()), sys.prefix, str(site.parent)}
    leaks = []
    for path in site.rglob("*"):
        if path.suffix in (".html", ".js", ".txt", ".css", ".ipynb", ".md"):
            text = path.read_text(encoding="utf-8", errors="replace")
            leaks += [f"{path.relative_to(site)}: {machine}" for machine in machine_paths
                      if machine + "/" in text]
    assert not leaks, "absolute paths of this machine in the site:\n" + "\n".join(leaks[:20])
