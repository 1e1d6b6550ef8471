"""ORM tables, one module per stored concept; importing this package registers them all."""

from gateway.tables.api_keys import ApiKey
from gateway.tables.batches import Batch, BatchLine, BatchResult
from gateway.tables.files import FileContent, StoredFile
from gateway.tables.idempotency import IdempotencyKey
from gateway.tables.rate_limits import KeyUsage, RateWindow
from gateway.tables.responses import StoredResponse
from gateway.tables.text2sql import Text2SQLRun, Text2SQLSchedule, Text2SQLSource
from gateway.tables.webhooks import WebhookDelivery

__all__ = ["ApiKey", "Batch", "BatchLine", "BatchResult", "FileContent", "IdempotencyKey", "KeyUsage", "RateWindow",
           "StoredFile",
           "StoredResponse", "Text2SQLRun", "Text2SQLSchedule", "Text2SQLSource", "WebhookDelivery"]
