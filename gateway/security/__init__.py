"""Security and tenancy: who owns a stored object, which addresses and databases a user may reach, secrets at rest."""
