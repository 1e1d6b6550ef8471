"""Webhooks: `metadata.webhook_url` on a batch or a background response gets a POST when it finishes.

The event is OpenAI's (`{"id": "evt_...", "object": "event", "type": "batch.completed", "data":
{"id": ...}}`), signed as OpenAI and Standard Webhooks sign theirs: headers `webhook-id`,
`webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`
keyed with `--webhook-secret` (a `whsec_<base64>` secret is base64-decoded first), so a receiver
can check it with `openai.OpenAI().webhooks.unwrap(body, headers, secret=...)`.

A server must not become a request-forgery tool, so a URL is accepted only when:
- webhooks are enabled (a secret and an allow-list are configured) and the scheme is https, or
  http to a host the list names by its exact name, address or network (a wildcard opens https only);
- its host is on the allow-list: a host name (`hooks.example.com`), a wildcard (`*.example.com`),
  an IP address or a CIDR network;
- every address the host resolves to passes gateway/security/address_policy.py: public, or covered by an
  IP/CIDR entry of the list, or private/loopback with the host listed by its exact name.
The check runs when the job is created (a refused URL is a 400 then) and again before every
attempt, which then connects to the address it checked (no DNS rebinding in between) and never
follows redirects. Failed attempts are retried with exponential backoff; deliveries are rows, so
they survive restarts."""

import asyncio
import base64
import hashlib
import hmac
import logging
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.protocol.webhooks import WebhookEvent, WebhookEventData, WebhookEventType
from gateway.security.address_policy import (
    METADATA_HOSTS,
    AddressRefused,
    AllowList,
    IPAddress,
    check_address,
    checked_address,
    literal_address,
)
from gateway.settings import Settings
from gateway.tables.webhooks import WebhookDelivery
from gateway.web.errors import APIError

log = logging.getLogger(__name__)

WEBHOOK_URL_KEY = "webhook_url"
IDLE_POLL_S = 1.0


class WebhookRefused(Exception):
    pass


class WebhookPolicy:
    def __init__(self, settings: Settings):
        self.secret = settings.webhook_secret
        self.allow = AllowList.parse(settings.webhook_allow_hosts)
        self.enabled = bool(self.secret) and bool(settings.webhook_allow_hosts)

    def check_syntax(self, url: str) -> tuple[str, str, int]:
        """(scheme, host, port) of an acceptable URL, before any DNS; raises WebhookRefused."""
        if not self.enabled:
            raise WebhookRefused("webhooks are not enabled on this server (start it with --webhook-secret and "
                                 "--webhook-allow-host)")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WebhookRefused(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise WebhookRefused("the URL must be http:// or https://")
        if parts.username is not None or parts.password is not None:
            raise WebhookRefused("the URL must not carry credentials")
        host = (parts.hostname or "").rstrip(".").lower()
        if not host:
            raise WebhookRefused("the URL has no host")
        if host in METADATA_HOSTS:
            raise WebhookRefused(f"{host} is a cloud metadata host")
        literal = literal_address(host)
        if literal is not None:
            if not self.allow.covers(literal):
                raise WebhookRefused(f"{host} is not on this server's webhook allow-list")
        elif not self.allow.lists_name(host):
            raise WebhookRefused(f"{host} is not on this server's webhook allow-list")
        # Plain http only where the operator named the host itself (its exact name, address or network):
        # a wildcard entry opens https only, so a payload is never sent in clear to a host nobody listed.
        if parts.scheme == "http" and literal is None and host not in self.allow.names:
            raise WebhookRefused(f"{host} is allowed over https only (list it by its exact name to allow http)")
        return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)

    def check_address(self, host: str, address: IPAddress) -> None:
        try:
            check_address(self.allow, host, address)
        except AddressRefused as exc:
            raise WebhookRefused(str(exc)) from None

    async def resolve(self, url: str) -> tuple[str, IPAddress]:
        """Checks `url` and every address its host resolves to; returns (host, the address to connect to)."""
        _, host, port = self.check_syntax(url)
        try:
            return host, await asyncio.to_thread(checked_address, self.allow, host, port)
        except AddressRefused as exc:
            raise WebhookRefused(str(exc)) from None

    async def validate(self, metadata: dict[str, str] | None, param: str = "metadata") -> str | None:
        """The webhook URL in `metadata`, checked; a refused one is a 400 naming the reason."""
        url = (metadata or {}).get(WEBHOOK_URL_KEY)
        if url is None:
            return None
        try:
            await self.resolve(url)
        except WebhookRefused as exc:
            raise APIError(400, f"{param}.{WEBHOOK_URL_KEY} is refused: {exc}", param=f"{param}.{WEBHOOK_URL_KEY}",
                           code="invalid_webhook_url") from None
        return url


def sign(secret: str, event_id: str, timestamp: int, body: str) -> str:
    key = base64.b64decode(secret[len("whsec_"):]) if secret.startswith("whsec_") else secret.encode()
    digest = hmac.new(key, f"{event_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def enqueue(session: AsyncSession, url: str | None, event_type: WebhookEventType, object_id: str) -> None:
    """Queues an event in the caller's transaction (a no-op without a URL)."""
    if not url:
        return
    event = WebhookEvent(id=f"evt_{uuid.uuid4().hex}", created_at=int(time.time()), type=event_type,
                         data=WebhookEventData(id=object_id))
    session.add(WebhookDelivery(id=event.id, url=url, payload=event.model_dump_json()))


def _pinned(url: str, address: IPAddress) -> str:
    """`url` with its host replaced by the address that was checked."""
    parts = urlsplit(url)
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


class WebhookSender:
    """Delivers due webhook rows: one attempt each, then a retry after webhook_backoff_s * 2^attempt."""

    def __init__(self, state, policy: WebhookPolicy):
        self.state = state
        self.policy = policy
        self.settings: Settings = state.settings
        self.wake = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=self.settings.webhook_timeout_s, follow_redirects=False,
                                         trust_env=False)

    async def run(self) -> None:
        try:
            while True:
                async with self.state.db.sessions() as session:
                    due = (await session.scalars(
                        select(WebhookDelivery).where(WebhookDelivery.status == "pending")
                        .order_by(WebhookDelivery.next_attempt_at).limit(32))).all()
                now = time.time()
                ready = [d for d in due if d.next_attempt_at <= now and await self._claim(d, now)]
                if ready:
                    await asyncio.gather(*(self._attempt(d) for d in ready))
                    continue
                # Rows queued by other transactions are seen within IDLE_POLL_S; `wake` is quicker.
                wait = min((d.next_attempt_at - now for d in due), default=IDLE_POLL_S)
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=max(0.01, min(wait, IDLE_POLL_S)))
                except TimeoutError:
                    pass
        finally:
            await self._client.aclose()

    async def _claim(self, delivery: WebhookDelivery, now: float) -> bool:
        """Takes a due delivery for one attempt, so that replicas sharing the database do not send
        it twice: its next attempt moves past this attempt's timeout, unless another replica moved
        it first. A replica that dies mid-attempt leaves it due again after that time."""
        async with self.state.db.sessions() as session:
            claimed = await session.execute(update(WebhookDelivery).where(
                WebhookDelivery.id == delivery.id, WebhookDelivery.status == "pending",
                WebhookDelivery.next_attempt_at == delivery.next_attempt_at,
            ).values(next_attempt_at=now + self.settings.webhook_timeout_s + 5))
            await session.commit()
        return bool(claimed.rowcount)

    async def _attempt(self, delivery: WebhookDelivery) -> None:
        error = await self._post(delivery)
        delivery.attempts += 1
        if error is None:
            delivery.status, delivery.last_error = "delivered", None
            log.info("webhook %s delivered to %s", delivery.id, urlsplit(delivery.url).hostname)
        else:
            delivery.last_error = error[:500]
            if delivery.attempts >= self.settings.webhook_max_attempts:
                delivery.status = "failed"
                log.warning("webhook %s gave up after %d attempts: %s", delivery.id, delivery.attempts, error)
            else:
                delay = self.settings.webhook_backoff_s * 2 ** (delivery.attempts - 1)
                delivery.next_attempt_at = time.time() + delay
                log.info("webhook %s attempt %d failed (%s); retrying in %.1fs", delivery.id, delivery.attempts,
                         error, delay)
        async with self.state.db.sessions() as session:
            await session.merge(delivery)
            await session.commit()

    async def _post(self, delivery: WebhookDelivery) -> str | None:
        """One attempt; the error as text, or None when the receiver answered 2xx."""
        try:
            host, address = await self.policy.resolve(delivery.url)
        except WebhookRefused as exc:
            return f"refused: {exc}"
        timestamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "sllm-webhooks/1",
            "host": urlsplit(delivery.url).netloc,
            "webhook-id": delivery.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self.policy.secret or "", delivery.id, timestamp, delivery.payload),
        }
        try:
            resp = await self._client.post(_pinned(delivery.url, address), content=delivery.payload.encode(),
                                           headers=headers, extensions={"sni_hostname": host})
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= resp.status_code < 300:
            return None
        return f"HTTP {resp.status_code}"
