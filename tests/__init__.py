"""Test suites; a package so that tests/gateway is imported as tests.gateway, never shadowing the gateway package."""
