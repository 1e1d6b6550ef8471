# Makes the repository root importable for tests run as plain `pytest` too.
