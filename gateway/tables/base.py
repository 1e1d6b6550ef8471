"""The declarative base every table is defined on: beside the tables, apart from the connection
plumbing (gateway/db.py), so that the schema's migrations (gateway/migrations/) read the tables
without importing the module that runs them."""

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The owner value of everything made by an admin key (gateway/security/tenancy.py reads it from here: the tables
# cannot import the tenancy module, which imports the api_keys table).
ADMIN = "admin"


class Base(DeclarativeBase):
    pass


class Owned:
    """The key that made a row (gateway/security/tenancy.py): `admin`, or `key_<id>` for a database key.
    Rows from before revision 0007 belong to the admin."""

    created_by: Mapped[str] = mapped_column(String(64), default=ADMIN, server_default=ADMIN, index=True)
