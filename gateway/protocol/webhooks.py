"""The event POSTed to a webhook when a batch or a background response finishes."""

from typing import Literal

from pydantic import BaseModel

WebhookEventType = Literal["batch.completed", "batch.failed", "batch.expired", "batch.cancelled",
                           "response.completed", "response.failed", "response.cancelled", "response.incomplete"]


class WebhookEventData(BaseModel):
    id: str


class WebhookEvent(BaseModel):
    """The body POSTed to a webhook: OpenAI's event shape, so `client.webhooks.unwrap` parses it."""

    id: str
    object: Literal["event"] = "event"
    created_at: int
    type: WebhookEventType
    data: WebhookEventData
