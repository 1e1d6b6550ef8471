"""Fixtures shared by every test folder."""

from tests.cpu_paths import cpu_path  # noqa: F401 - the fixture, for tests parametrized over CPU paths
