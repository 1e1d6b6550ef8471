"""Tenancy findings of the second review, each reproduced without a model: a response id only an upstream
knows (a streamed answer this gateway did not store) is not forwarded for a database key, whose
request could otherwise continue another key's conversation through the upstream's one shared client;
addresses written as numbers (decimal, octal, hex, short forms), IPv4-mapped, NAT64, 6to4, Teredo and
IPv4-compatible IPv6 are judged as the IPv4 address they reach; and a name whose second resolution
turns private (DNS rebinding) never gets a connection: webhooks and sources connect to the address
that was checked."""

import asyncio
import ipaddress
import socket
from types import SimpleNamespace

import httpx
import pytest
from sqlalchemy.engine import make_url

from gateway.db import Database
from gateway.jobs.webhooks import WebhookPolicy, WebhookSender
from gateway.protocol.responses import ResponseObject, ResponsesRequest
from gateway.registry import ModelRegistry, UpstreamModel
from gateway.security.address_policy import AddressRefused, AllowList, carried_ipv4, checked_address
from gateway.security.source_policy import SourcePolicy
from gateway.security.tenancy import ADMIN_CALLER, Caller
from gateway.serving.responses import run_response
from gateway.settings import ModelEntry, Settings
from gateway.tables.responses import StoredResponse
from gateway.tables.webhooks import WebhookDelivery
from gateway.web.errors import APIError
from integrations.text2sql.errors import BadSourceURL

PUBLIC = "93.184.216.34"  # a global address: allowed without any list entry


# -- previous_response_id through an upstream ----------------------------------------------------------


class _Pool:
    """An upstream that records what it is sent and answers every /responses call."""

    def __init__(self):
        self.sent: list[dict] = []

    async def post(self, path: str, body: dict) -> dict:
        self.sent.append(body)
        return ResponseObject(model="up", status="completed").model_dump(mode="json")


@pytest.fixture
def upstream_world(tmp_path):
    async def make():
        db = Database(str(tmp_path / "sllm.db"))
        await db.create_all()
        return db

    db = asyncio.run(make())
    pool = _Pool()
    entry = ModelEntry(name="remote", upstream=["http://upstream.invalid/v1"])
    models = ModelRegistry(models={"remote": UpstreamModel("remote", entry, pool)})
    state = SimpleNamespace(models=models, db=db, metrics=SimpleNamespace(observe_upstream=lambda *a: None))
    yield state, pool
    asyncio.run(db.dispose())


def _continue(state, previous: str, caller: Caller) -> ResponseObject:
    async def go():
        body = ResponsesRequest(model="remote", input="Go on", previous_response_id=previous)
        async with state.db.sessions() as session:
            return await run_response(body, state, session, caller=caller)

    return asyncio.run(go())


def test_an_upstream_only_response_id_is_not_forwarded_for_a_database_key(upstream_world):
    state, pool = upstream_world
    bob = Caller.for_key(2)
    with pytest.raises(APIError) as refused:  # a batch line or a request of bob's: refused as unknown
        _continue(state, "resp_only_the_upstream_knows", bob)
    assert refused.value.status == 400 and refused.value.code == "previous_response_not_found"
    assert pool.sent == []  # nothing reached the upstream
    # The operator's requests still name the upstream's ids.
    _continue(state, "resp_only_the_upstream_knows", ADMIN_CALLER)
    assert pool.sent[-1]["previous_response_id"] == "resp_only_the_upstream_knows"


def test_a_stored_response_goes_upstream_as_its_owners_conversation_only(upstream_world):
    state, pool = upstream_world
    alice, bob = Caller.for_key(1), Caller.for_key(2)

    async def store():
        async with state.db.sessions() as session:
            session.add(StoredResponse(id="resp_alices", model="remote", status="completed", previous_response_id=None,
                                       conversation=[{"role": "user", "content": "alice's secret"}],
                                       body=ResponseObject(model="remote").model_dump(mode="json"),
                                       created_by=alice.owner))
            await session.commit()

    asyncio.run(store())
    with pytest.raises(APIError) as refused:
        _continue(state, "resp_alices", bob)
    assert refused.value.code == "previous_response_not_found" and pool.sent == []
    _continue(state, "resp_alices", alice)
    assert "previous_response_id" not in pool.sent[-1]
    assert pool.sent[-1]["input"][0] == {"role": "user", "content": "alice's secret"}


# -- addresses in every spelling -----------------------------------------------------------------------


LOOPBACK_SPELLINGS = ["2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "017700000001", "127.1", "127.0.1",
                      "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::127.0.0.1]", "[64:ff9b::7f00:1]",
                      "[2002:7f00:1::]", "[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b:1::7f00:1]"]
PRIVATE_SPELLINGS = ["167772161", "0xa000001", "012.0.0.1", "[64:ff9b::10.0.0.1]", "[2002:a00:1::]",
                     "[2001:0:4136:e378:8000:63bf:f5ff:fffe]"]  # Teredo whose client is 10.0.0.1


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + PRIVATE_SPELLINGS + ["[64:ff9b::169.254.169.254]"])
def test_numeric_and_embedded_ipv4_spellings_are_judged_as_the_ipv4_they_reach(host):
    with pytest.raises(AddressRefused):
        checked_address(AllowList.parse([]), host.strip("[]"), 80)


def test_embedded_public_ipv4_stays_open_and_the_carried_address_is_what_is_checked():
    for given in ("::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1", "::ffff:0:8.8.8.8"):
        assert carried_ipv4(ipaddress.ip_address(given)) == ipaddress.ip_address("8.8.8.8"), given
    assert carried_ipv4(ipaddress.ip_address("2606:4700::1111")) is None
    # Connected to as given: the IPv4 may be reachable only through the translator.
    assert str(checked_address(AllowList.parse([]), "64:ff9b::8.8.8.8", 443)) == "64:ff9b::808:808"
    # A list entry for the IPv4 network opens its embedded spellings too, and only them.
    assert checked_address(AllowList.parse(["10.0.0.0/8"]), "64:ff9b::10.0.0.1", 80)
    with pytest.raises(AddressRefused):
        checked_address(AllowList.parse(["10.0.0.0/8"]), "64:ff9b::127.0.0.1", 80)


def test_webhook_urls_with_numeric_hosts_are_refused():
    policy = WebhookPolicy(Settings(webhook_secret="whsec_c2VjcmV0", webhook_allow_hosts=["*.example.test",
                                                                                         "hooks.example.org"]))
    for host in LOOPBACK_SPELLINGS + PRIVATE_SPELLINGS:
        with pytest.raises(Exception) as refused:
            asyncio.run(policy.resolve(f"http://{host}/x"))
        assert type(refused.value).__name__ == "WebhookRefused", host


# -- DNS rebinding -----------------------------------------------------------------------------------------


@pytest.fixture
def rebinding(monkeypatch):
    """`rebind.example.test` resolves to a public address first, to loopback from then on."""
    real, calls = socket.getaddrinfo, []

    def resolver(host, port, *args, **kwargs):
        if str(host) == "rebind.example.test":
            calls.append(host)
            address = PUBLIC if len(calls) == 1 else "127.0.0.1"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 0))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    return calls


def test_a_webhook_connects_to_the_checked_address_and_a_rebound_name_gets_no_connection(rebinding, tmp_path):
    settings = Settings(db=str(tmp_path / "sllm.db"), webhook_secret="whsec_c2VjcmV0",
                        webhook_allow_hosts=["*.example.test"])
    policy = WebhookPolicy(settings)
    seen: list[httpx.Request] = []
    sender = WebhookSender(SimpleNamespace(settings=settings), policy)
    sender._client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: seen.append(r) or httpx.Response(200)))
    delivery = WebhookDelivery(id="evt_1", url="https://rebind.example.test/hook", payload="{}")

    async def attempts():
        first = await sender._post(delivery)  # resolves to the public address: sent there, by address
        second = await sender._post(delivery)  # now resolves to loopback: refused, nothing sent
        await sender._client.aclose()
        return first, second

    first, second = asyncio.run(attempts())
    assert first is None and second is not None and second.startswith("refused"), (first, second)
    assert len(seen) == 1 and seen[0].url.host == PUBLIC  # the name was not looked up again to connect
    assert seen[0].headers["host"] == "rebind.example.test" and seen[0].extensions["sni_hostname"] == \
        "rebind.example.test"
    assert len(rebinding) == 2  # one resolution per attempt, none by the HTTP client


def test_a_source_is_pinned_to_the_checked_address_and_a_rebound_name_is_refused(rebinding, tmp_path):
    policy = SourcePolicy(Settings(db=str(tmp_path / "sllm.db")))
    pinned = policy.check(make_url("postgresql+psycopg2://u@rebind.example.test:5432/db"), admin=False)
    assert pinned.query["hostaddr"] == PUBLIC and pinned.host == "rebind.example.test"  # libpq: name for TLS
    with pytest.raises(BadSourceURL):  # the next engine made for it re-checks: loopback now, refused
        policy.check(make_url("mysql+pymysql://u@rebind.example.test/db"), admin=False)
    rebinding.clear()
    assert policy.check(make_url("mysql+pymysql://u@rebind.example.test/db"), admin=False).host == PUBLIC
