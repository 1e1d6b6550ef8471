"""Fixtures shared by every test folder."""

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cpu_paths import cpu_path  # noqa: F401 - the fixture, for tests parametrized over CPU paths
from tests.postgres import SKIP_REASON, PostgresCluster, find_bin

# httpx's module-level helpers time out after 5 s, a clock the tests never meant to test: on a loaded
# 2-core machine (parallel workers, a busy CI host) one real generation can take longer. Tests that
# time something pass their own timeout, which wins.
TEST_HTTP_TIMEOUT = httpx.Timeout(120.0, connect=10.0)


def _patient(call):
    @functools.wraps(call)
    def wrapper(*args, **kwargs):
        kwargs.setdefault("timeout", TEST_HTTP_TIMEOUT)
        return call(*args, **kwargs)
    return wrapper


for _name in ("request", "get", "post", "put", "patch", "delete", "stream"):
    setattr(httpx, _name, _patient(getattr(httpx, _name)))


# Parallel workers (scripts/test.sh) share the cores: each takes its part of them for torch, so two
# workers' thread teams do not fight over two cores (the decode step's barrier spins).
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


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
