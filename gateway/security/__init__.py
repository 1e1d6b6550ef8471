"""Security and tenancy policies: who owns a stored object, which addresses and databases a user may reach, secrets at rest."""
