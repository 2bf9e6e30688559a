"""The report's pages are Jinja2 templates with autoescape on (issue 24): a model id, a warehouse path or any other
value from a catalog or a warehouse renders as text, never as HTML. Static checks of the written files (the pages
in a browser: tests/test_report.py)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from evalfarm.analysis.report import _model_page, build_report, model_slug, templates
from evalfarm.warehouse import Warehouse, now

EVIL = "<script>alert(1)</script>"
EVIL_DIR = "<img src=x onerror=alert(2)>"  # a folder name: no "/"


class _Texts(HTMLParser):
    """Every tag and the text inside each <h1>, <title>, <code>, <td> and <th>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.texts: dict[str, list[str]] = {}
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1] in ("h1", "title", "code", "td", "th", "a"):
            self.texts.setdefault(self._open[-1], []).append(data)


def _parse(page: str) -> _Texts:
    p = _Texts()
    p.feed(page)
    return p


@pytest.mark.parametrize("name", ["page.html.j2", "index.html.j2", "model.html.j2", "macros.html.j2", "other.txt"])
def test_every_template_autoescapes(name):
    assert templates().autoescape(name) is True


def test_a_model_id_and_its_facts_with_script_render_as_text():
    info = {"level": "word", "kind": EVIL, "base": EVIL, "spec_hash": "<b>h</b>", "run_id": "r"}
    failures = [{"created_at": "t", "run_id": "r", "task": "<i>t</i>", "stage": "score", "error": EVIL}]
    page = _model_page(EVIL, info, [], [], failures, {"words": [EVIL, "<u>w</u>"]}, {EVIL}, 5)
    parsed = _parse(page)
    assert "script" not in parsed.tags and not {"b", "i", "u"} & set(parsed.tags), parsed.tags
    assert parsed.texts["h1"] == [EVIL] and parsed.texts["title"] == [f"{EVIL} · evalfarm"]
    assert EVIL in parsed.texts["td"] and "<b>h</b>" in parsed.texts["td"] and ", <u>w</u>" in parsed.texts["td"]
    assert parsed.texts["a"].count(EVIL) == 2  # base and "bag of words over it for": links, the id as their text
    assert f"href='{model_slug(EVIL)}.html'" in page and "<" not in model_slug(EVIL)


def test_the_index_shows_a_hostile_warehouse_path_and_model_id_as_text(tmp_path):
    wh = Warehouse(tmp_path / EVIL_DIR).init()
    wh.write_model({"model": EVIL, "level": "sentence", "kind": "static", "dim": 2, "spec_hash": "evil",
                    "provenance": "{}", "spec": "[]", "run_id": "r", "created_at": now()})  # fmt: skip
    index = build_report(wh, tmp_path / "out", refresh=False)
    page = index.read_text(encoding="utf-8")
    parsed = _parse(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags, parsed.tags
    assert any(EVIL_DIR in t for t in parsed.texts["code"])
    assert parsed.texts["a"].count(EVIL) == 2  # the models table and the model versions table
    model_page = (tmp_path / "out" / "models" / f"{model_slug(EVIL)}.html").read_text(encoding="utf-8")
    assert _parse(model_page).texts["h1"] == [EVIL]
    assert page.endswith("</body></html>\n") and page.startswith("<!doctype html>\n")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_templates_ship_in_the_package():
    import importlib.resources

    shipped = {p.name for p in importlib.resources.files("evalfarm.templates").iterdir()}
    assert {"page.html.j2", "index.html.j2", "model.html.j2", "macros.html.j2"} <= shipped
    assert Path(__file__).parents[1].joinpath("evalfarm", "templates", "page.html.j2").is_file()
