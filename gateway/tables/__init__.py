"""ORM tables, one module per stored concept; importing this package registers them all."""

from gateway.tables.api_keys import ApiKey
from gateway.tables.responses import StoredResponse

__all__ = ["ApiKey", "StoredResponse"]
