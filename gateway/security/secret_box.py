"""Secrets at rest: text-to-SQL source URLs that carry a password (or a secret-looking query
parameter) are stored encrypted with the server's key, `SLLM_SECRET_KEY` (Fernet: AES-128-CBC with an
HMAC-SHA256, from the `cryptography` package). Any string is a key: it is stretched with SHA-256 into
Fernet's 32 bytes, so `openssl rand -base64 32` or Fernet.generate_key() both do.

A stored value is `enc:v1:<token>`; URLs without secrets are stored as given. A server whose
database holds encrypted values refuses to start without the key that made them, saying so, rather
than failing on the first question; a URL with a secret cannot be stored without a key (a 400)."""

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.engine import make_url

from gateway.db import Database
from gateway.tables.text2sql import Text2SQLSource
from integrations.text2sql.sources import redact_url

PREFIX = "enc:v1:"


class SecretKeyError(RuntimeError):
    pass


def has_secret(url: str) -> bool:
    """Whether `url` carries a password, or a query parameter the redacted form hides."""
    try:
        parsed = make_url(url)
    except Exception:  # not a URL: nothing to protect, and the registry refuses it anyway
        return False
    return parsed.password is not None or redact_url(parsed) != parsed.render_as_string(hide_password=True)


class SecretBox:
    def __init__(self, key: SecretStr | str | None):
        raw = key.get_secret_value() if isinstance(key, SecretStr) else key
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(raw.encode()).digest())) if raw else None

    @property
    def enabled(self) -> bool:
        return self._fernet is not None

    def seal(self, url: str) -> str:
        """What the database stores for `url`."""
        if not has_secret(url):
            return url
        if self._fernet is None:
            raise SecretKeyError("this server has no SLLM_SECRET_KEY: a database URL with a password is only stored "
                                 "encrypted; set SLLM_SECRET_KEY (any long random string) and restart")
        return PREFIX + self._fernet.encrypt(url.encode()).decode()

    def open(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            return stored
        if self._fernet is None:
            raise SecretKeyError("the database holds text-to-SQL sources encrypted with SLLM_SECRET_KEY, and this "
                                 "server has none: start it with the key they were stored with")
        try:
            return self._fernet.decrypt(stored[len(PREFIX):].encode()).decode()
        except InvalidToken:
            raise SecretKeyError("SLLM_SECRET_KEY does not decrypt the text-to-SQL sources stored in the database: "
                                 "start the server with the key they were stored with") from None

    async def check_database(self, db: Database) -> int:
        """Opens every encrypted source once (at start): a missing or wrong key fails now, not on a
        question. Returns how many there are."""
        async with db.sessions() as session:
            sealed = (await session.scalars(select(Text2SQLSource.url)
                                            .where(Text2SQLSource.url.startswith(PREFIX)))).all()
        for value in sealed:
            self.open(value)
        return len(sealed)
