"""Sources and their registry: clear errors for bad names and URLs, no leaked credentials, live schema."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from integrations.text2sql.dataset import build_database, schema_ddl
from integrations.text2sql.errors import (
    BadSourceURL,
    DuplicateSource,
    SourceUnavailable,
    Text2SQLError,
    UnknownSource,
)
from integrations.text2sql.registry import (
    FunctionSourceStore,
    JsonFileSourceStore,
    MemorySourceStore,
    SourceRegistry,
)
from integrations.text2sql.sources import Source, SourceSpec, demo_source, redact_url


@pytest.fixture()
def shop_path(tmp_path):
    return build_database("shop", tmp_path / "shop.sqlite")


def test_unknown_source_names_what_exists(shop_path):
    reg = SourceRegistry()
    with pytest.raises(UnknownSource, match="none are registered") as err:
        reg.get("sales")
    assert err.value.code == "unknown_source" and err.value.status == 404
    reg.register("shop", f"sqlite:///{shop_path}")
    with pytest.raises(UnknownSource, match="registered: shop"):
        reg.get("sales")
    with pytest.raises(UnknownSource):
        reg.unregister("sales")


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "empty"),
        ("not a url", "not a SQLAlchemy URL"),
        ("nosuchdialect://host/db", "no driver"),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("sqlite:////nonexistent/dir/shop.sqlite", "cannot open SQLite database"),
        ("postgresql+nosuchdriver://user:hunter2@db.example/app", "no driver"),
    ],
)
def test_broken_urls_are_refused_at_registration(url, fragment):
    reg = SourceRegistry()
    with pytest.raises(BadSourceURL, match=fragment) as err:
        reg.register("broken", url)
    assert err.value.code == "bad_source_url"
    assert "hunter2" not in err.value.message
    assert reg.store.names() == []


def test_a_file_that_is_not_a_database_is_unavailable(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(SourceUnavailable) as err:
        Source("junk", f"sqlite:///{junk}").schema()
    assert isinstance(err.value, Text2SQLError) and err.value.code == "source_unavailable"
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    with pytest.raises(SourceUnavailable, match="no tables"):
        Source("empty", f"sqlite:///{empty}").schema()


def test_credentials_never_leave_through_the_api():
    url = "postgresql://bob:hunter2@db.example:5432/app?sslmode=require&api_token=abc123"
    src = Source("pg", url)
    assert "hunter2" in src.url  # kept for connecting and storing
    for text in (src.redacted_url(), repr(src), str(src.to_dict()), redact_url(url)):
        assert "hunter2" not in text and "abc123" not in text
    assert src.redacted_url().startswith("postgresql://bob:***@db.example:5432/app")


def test_introspection_gives_ddl_with_keys(shop_path):
    src = Source("shop", f"sqlite:///{shop_path}")
    schema = src.schema()
    assert schema.table_names == ["cities", "customers", "products", "orders", "order_items"]
    # SQLite keeps each CREATE statement verbatim, author comments included: that is the prompt text.
    assert src.ddl() == schema_ddl("shop")
    rendered = schema.to_ddl(native=False)
    assert "CREATE TABLE order_items (" in rendered
    assert "order_item_id INTEGER PRIMARY KEY" in rendered
    assert "order_id INTEGER NOT NULL REFERENCES orders(order_id)" in rendered
    assert "CHECK (status IN ('pending', 'shipped', 'delivered', 'cancelled'))" in rendered
    described = src.to_dict(with_schema=True)
    assert described["tables"]["cities"] == ["city_id", "name", "country"]


def test_schema_is_cached_until_refreshed(shop_path):
    src = Source("shop", f"sqlite:///{shop_path}")
    first = src.schema()
    grammar = src.grammar()
    con = sqlite3.connect(shop_path)  # someone migrates the database behind our back
    con.execute("CREATE TABLE coupons (coupon_id INTEGER PRIMARY KEY, code TEXT NOT NULL)")
    con.commit()
    con.close()
    assert src.schema() is first and "coupons" not in src.grammar()
    assert "coupons" in src.refresh().table_names
    assert '"coupons"' in src.grammar() and src.grammar() != grammar


def test_registry_register_replace_unregister(shop_path, tmp_path):
    reg = SourceRegistry()
    src = reg.register("shop", f"sqlite:///{shop_path}", "the shop")
    assert reg.get("shop") is src  # one live source, schema introspected once
    with pytest.raises(DuplicateSource):
        reg.register("shop", f"sqlite:///{shop_path}")
    other = build_database("hr", tmp_path / "hr.sqlite")
    replaced = reg.register("shop", f"sqlite:///{other}", replace=True)
    assert reg.get("shop") is replaced and "employees" in replaced.schema().table_names
    assert [s.name for s in reg.list()] == ["shop"]
    reg.unregister("shop")
    with pytest.raises(UnknownSource):
        reg.get("shop")


def test_source_for_reuses_live_sources_until_the_url_changes(shop_path, tmp_path):
    reg = SourceRegistry()
    spec = SourceSpec("shop", f"sqlite:///{shop_path}")
    a = reg.source_for(spec)
    assert reg.source_for(SourceSpec("shop", f"sqlite:///{shop_path}", "renamed")) is a
    other = build_database("hr", tmp_path / "hr.sqlite")
    assert reg.source_for(SourceSpec("shop", f"sqlite:///{other}")) is not a


def test_stores_are_pluggable(shop_path, tmp_path):
    rows: dict[str, SourceSpec] = {}
    store = FunctionSourceStore(load=rows.get, save=lambda s: rows.__setitem__(s.name, s),
                                delete=lambda n: rows.pop(n, None) is not None, names=lambda: sorted(rows))
    reg = SourceRegistry(store)
    reg.register("shop", f"sqlite:///{shop_path}")
    assert rows["shop"].url == f"sqlite:///{shop_path}"
    read_only = SourceRegistry(FunctionSourceStore(load=rows.get))
    assert read_only.get("shop").schema().table_names[0] == "cities"
    with pytest.raises(NotImplementedError):
        read_only.register("x", f"sqlite:///{shop_path}", replace=True)

    path = tmp_path / "conf" / "sources.json"
    file_reg = SourceRegistry(JsonFileSourceStore(path))
    file_reg.register("shop", f"sqlite:///{shop_path}", "from a file")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # URLs may hold passwords
    again = SourceRegistry(JsonFileSourceStore(path)).get("shop")
    assert again.description == "from a file" and again.schema().table_names[0] == "cities"
    assert isinstance(MemorySourceStore().names(), list)


def test_demo_sources():
    src = demo_source("library")
    assert src.name == "demo-library" and "loans" in src.schema().table_names
    with pytest.raises(BadSourceURL, match="unknown text2sql schema"):
        demo_source("nope")
