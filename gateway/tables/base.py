"""The declarative base every table is defined on: beside the tables, apart from the connection
plumbing (gateway/db.py), so that the schema's migrations (gateway/migrations/) read the tables
without importing the module that runs them."""

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass
