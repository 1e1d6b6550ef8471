"""Which databases a text-to-SQL source may open: the guard every source connects through
(integrations/text2sql/sources.py `URLGuard`), asked before anything connects.

- The server's own database is never a source, whoever asks and however it is spelled: SQLite
  paths are resolved (relative paths, `~`, `file:` URIs, symlinks) and compared as files (hard links
  too), with its -wal, -shm and -journal files; a network URL naming the server's database on an
  address its host resolves to is refused.
- SQLite: a source opens the canonical path that was checked (a `file:` URI's parameters, `mode`
  and `vfs` among them, are dropped). With --text2sql-source-dir every SQLite source must lie in it
  (or be a demo database); without it, only admins may open SQLite files.
- Network databases of a database key: the host must resolve only to addresses the address policy
  (gateway/security/address_policy.py, with --text2sql-allow-hosts) allows, and the connection is pinned to
  the checked address; query parameters that choose another host or a local socket are refused.
Admins' network sources are theirs to choose (the operator's own databases are usually internal)."""

import os
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import URL, make_url

from gateway.db import database_url
from gateway.security.address_policy import AddressRefused, AllowList, checked_address, resolve_all
from gateway.settings import Settings
from integrations.text2sql.errors import BadSourceURL
from integrations.text2sql.sources import URLGuard

# Parameters through which a driver connects somewhere else than the URL's host (libpq, MySQL drivers),
# or reads local files.
_ROUTING_PARAMS = {"host", "hostaddr", "unix_socket", "unix_sock", "service", "servicefile", "passfile",
                   "sslkey", "sslcert", "sslrootcert", "sslcrl", "read_default_file", "read_default_group",
                   "options", "socket", "dsn"}
_LIBPQ_DRIVERS = {"psycopg2", "psycopg", "psycopg2cffi"}
_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def _refused(message: str) -> BadSourceURL:
    return BadSourceURL(message, code="source_refused")


def sqlite_path(url: URL) -> Path:
    """The file a SQLite URL opens, resolved as SQLite would find it (symlinks followed)."""
    db = url.database or ""
    if db.startswith("file:"):
        rest = db[len("file:"):].split("#", 1)[0].partition("?")[0]
        if rest.startswith("//"):
            authority, _, path = rest[2:].partition("/")
            if authority not in ("", "localhost"):
                raise _refused(f"a SQLite file: URI names the host {authority!r}")
            rest = "/" + path
        path = Path(unquote(rest))
    else:
        path = Path(db).expanduser()
    return path.resolve()


class SourcePolicy:
    def __init__(self, settings: Settings, demo_dir: Path | None = None):
        self.source_dir = Path(settings.text2sql_source_dir).expanduser().resolve() \
            if settings.text2sql_source_dir else None
        self.demo_dir = demo_dir.resolve() if demo_dir is not None else None
        self.allow = AllowList.parse(settings.text2sql_allow_hosts)
        self.server_db = make_url(database_url(settings.db))

    def guard_for(self, admin: bool) -> URLGuard:
        return lambda url: self.check(url, admin)

    def check(self, url: URL, admin: bool) -> URL:
        """The URL to connect to for `url`; raises BadSourceURL (a 400) for one the policy refuses."""
        if url.get_backend_name() == "sqlite":
            return self._check_sqlite(url, admin)
        return self._check_network(url, admin)

    # -- SQLite ------------------------------------------------------------------------------------
    def _is_server_file(self, path: Path) -> bool:
        if self.server_db.get_backend_name() != "sqlite" or not self.server_db.database:
            return False
        server = sqlite_path(self.server_db)
        for suffix in _SQLITE_SIDE_FILES:
            side = server.with_name(server.name + suffix)
            if path == side or (path.exists() and side.exists() and os.path.samefile(path, side)):
                return True
        return False

    def _check_sqlite(self, url: URL, admin: bool) -> URL:
        path = sqlite_path(url)
        if self._is_server_file(path):
            raise _refused("the server's own database cannot be a text-to-SQL source")
        inside = [d for d in (self.source_dir, self.demo_dir) if d is not None and path.is_relative_to(d)]
        if not inside and (self.source_dir is not None or not admin):
            where = f"inside {self.source_dir} (--text2sql-source-dir)" if self.source_dir else \
                "nowhere for this key: the server has no --text2sql-source-dir"
            raise _refused(f"SQLite sources may be opened {where}; {path} is not")
        if not path.is_file():
            raise BadSourceURL(f"no SQLite database file at {path}")
        # Exactly the file checked, whatever the URI asked for (mode, vfs, immutable: dropped).
        return URL.create("sqlite", database=str(path))

    # -- network databases -------------------------------------------------------------------------
    def _is_server_database(self, url: URL) -> bool:
        server = self.server_db
        if server.get_backend_name() == "sqlite" or url.get_backend_name() != server.get_backend_name():
            return False
        if (url.database or "") != (server.database or ""):
            return False
        if (url.port or 5432) != (server.port or 5432):
            return False
        try:
            theirs = set(resolve_all(url.host or "localhost", url.port))
            ours = set(resolve_all(server.host or "localhost", server.port))
        except AddressRefused:
            return False
        local = any(a.is_loopback or a.is_unspecified for a in theirs) and \
            any(a.is_loopback or a.is_unspecified for a in ours)
        return bool(theirs & ours) or local

    def _check_network(self, url: URL, admin: bool) -> URL:
        if self._is_server_database(url):
            raise _refused("the server's own database cannot be a text-to-SQL source")
        if admin:
            return url
        routed = sorted(k for k in url.query if k.lower() in _ROUTING_PARAMS)
        if routed:
            raise _refused(f"source URL parameters {', '.join(routed)} are not allowed for this key")
        if not url.host:
            raise _refused("a network source needs a host (a local socket is not allowed for this key)")
        try:
            address = checked_address(self.allow, url.host, url.port)
        except AddressRefused as exc:
            raise _refused(f"{exc} (--text2sql-allow-hosts opens a host)") from None
        # Pinned: the driver connects to the address checked, not to whatever the name resolves to later.
        # libpq keeps the name (for TLS) and takes the address as hostaddr.
        if url.get_driver_name() in _LIBPQ_DRIVERS:
            return url.update_query_dict({"hostaddr": str(address)})
        return url.set(host=str(address))
