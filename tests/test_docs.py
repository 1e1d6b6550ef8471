"""The docs' API reference is the app's own OpenAPI document as it is now (scripts/openapi_page.py writes it);
`mkdocs build --strict` in scripts/test.sh checks the rest of the site (links, anchors, the nav)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _page_module():
    spec = importlib.util.spec_from_file_location("openapi_page", ROOT / "scripts" / "openapi_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_reference_is_the_apps_openapi_document():
    page = _page_module()
    want = page.render(page.openapi_document())
    stale = "docs/reference/api.md is stale: run python scripts/openapi_page.py and commit the page"
    assert page.PAGE.read_text(encoding="utf-8") == want, stale


def test_the_page_is_the_same_bytes_every_time():
    page = _page_module()
    doc = page.openapi_document()
    assert page.render(doc) == page.render(page.openapi_document())
