"""Fixtures shared by every test folder."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cpu_paths import cpu_path  # noqa: F401 - the fixture, for tests parametrized over CPU paths
from tests.postgres import SKIP_REASON, PostgresCluster, find_bin


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL server for the whole session (tests/postgres.py); skips without one."""
    bin_dir = find_bin()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    cluster = PostgresCluster(bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path: Path) -> str:
    """A fresh, empty database: a SQLite file, then a database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "sllm.db")
    return request.getfixturevalue("postgres").new_database()
