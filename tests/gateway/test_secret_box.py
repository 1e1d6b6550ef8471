"""Secrets at rest (gateway/security/secret_box.py) on SQLite and PostgreSQL: a source URL with a password is
stored encrypted and comes back whole with the key; a database holding encrypted sources fails the
start's check without the key, or with another one, saying SLLM_SECRET_KEY; URLs without secrets are
stored as given."""

import pytest
from sqlalchemy import select

from gateway.db import Database
from gateway.security.secret_box import PREFIX, SecretBox, SecretKeyError, has_secret
from gateway.tables.text2sql import Text2SQLSource

URL = "postgresql://reader:s3cret-pw@db.example.org:5432/shop"


def test_which_urls_carry_secrets():
    assert has_secret(URL) and has_secret("mysql://u@h/db?password=x")
    assert not has_secret("postgresql://u@h/db") and not has_secret("sqlite:///x.db")
    assert not has_secret("mysql://u@h/db?charset=utf8")


async def test_sealed_at_rest_and_the_start_checks_the_key(db_url):
    box = SecretBox("a long random test key")
    db = Database(db_url)
    try:
        await db.create_all()
        async with db.sessions() as session:
            session.add(Text2SQLSource(name="secret", url=box.seal(URL)))
            session.add(Text2SQLSource(name="plain", url=box.seal("sqlite:///plain.db")))
            await session.commit()
            stored = dict((await session.execute(select(Text2SQLSource.name, Text2SQLSource.url))).all())
        assert stored["plain"] == "sqlite:///plain.db"
        assert stored["secret"].startswith(PREFIX) and "s3cret-pw" not in stored["secret"]
        assert box.open(stored["secret"]) == URL
        assert await box.check_database(db) == 1
        for other in (SecretBox(None), SecretBox("another key")):
            with pytest.raises(SecretKeyError, match="SLLM_SECRET_KEY"):
                await other.check_database(db)
        with pytest.raises(SecretKeyError, match="SLLM_SECRET_KEY"):
            SecretBox(None).seal(URL)
    finally:
        await db.dispose()
