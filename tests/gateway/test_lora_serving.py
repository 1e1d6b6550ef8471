"""LoRA adapters through the server: listed as models with their base as `parent`, selected by the
request's `model` in chat, completions and responses, loaded and unloaded at run time by an admin key,
without disturbing requests of other adapters or leaking KV blocks."""

import asyncio
import shutil
import threading

import httpx
import openai
import pytest

from engine import LLM, SamplingParams
from engine.loader import resolve_model
from tests.engine.conftest import make_tiny_llama
from tests.engine.lora_helpers import make_adapter
from tests.gateway.server import run_server

KEY = "admin-key"
PROMPT = "SELECT name FROM users WHERE"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-serve")
    base = make_tiny_llama(root / "base", resolve_model("default"), seed=4)
    return root, base, {n: make_adapter(base, root / n, seed=20 + i, r=4) for i, n in enumerate("abc")}


@pytest.fixture(scope="module")
def server(files):
    root, base, adapters = files
    with run_server(root, model=str(base), served_model_name="tiny", api_keys=[KEY], num_kv_blocks=128,
                    max_loras=3, max_lora_rank=8,
                    lora_modules=[f"sql-a={adapters['a']}", f"sql-b={adapters['b']}"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def offline(files):
    """The same greedy completions from the offline API, per adapter (None: the base model)."""
    _, base, adapters = files
    llm = LLM(model=str(base), enable_lora=True, num_kv_blocks=64, max_lora_rank=8,
              lora_modules={"sql-a": str(adapters["a"]), "sql-b": str(adapters["b"])})
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    return {n: llm.generate(PROMPT, params, use_tqdm=False, lora_request=n)[0].outputs[0].text
            for n in (None, "sql-a", "sql-b")}


def client(srv, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key=key, max_retries=0)


def admin(srv, path: str, body: dict, key: str | None = KEY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{srv.base_url}/{path}", json=body, headers=headers, timeout=60)


def complete(srv, model: str) -> str:
    out = client(srv).completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0,
                                         extra_body={"ignore_eos": True})
    assert out.model == model
    return out.choices[0].text


def test_adapters_are_models_with_their_base_as_parent(server, files):
    _, _, adapters = files
    cards = {m.id: m for m in client(server).models.list().data}
    assert set(cards) == {"tiny", "tiny-embed", "sql-a", "sql-b"}
    assert cards["sql-a"].parent == "tiny" and cards["sql-a"].root == str(adapters["a"])
    assert getattr(cards["tiny"], "parent", None) is None
    assert client(server).models.retrieve("sql-b").parent == "tiny"


def test_completions_pick_the_adapter_by_model(server, offline):
    assert offline["sql-a"] != offline[None] != offline["sql-b"]
    got = {n: complete(server, n or "tiny") for n in (None, "sql-a", "sql-b")}
    assert got == offline
    server.assert_no_leak()


def test_chat_and_responses_use_the_adapter(server):
    c = client(server)
    msgs = [{"role": "user", "content": "List the users."}]

    def chat(model: str) -> str:
        out = c.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0)
        assert out.model == model
        return out.choices[0].message.content

    base, a = chat("tiny"), chat("sql-a")
    assert a != base and chat("sql-a") == a
    resp = c.responses.create(model="sql-a", input="List the users.", max_output_tokens=8, temperature=0)
    assert resp.model == "sql-a" and resp.output_text
    assert resp.output_text == a  # the same conversation rendered the same way
    server.assert_no_leak()


def test_unknown_adapter_is_a_404(server):
    with pytest.raises(openai.NotFoundError) as err:
        complete(server, "sql-zzz")
    assert err.value.body["code"] == "model_not_found"


def test_load_and_unload_at_run_time(server, files, offline):
    _, _, adapters = files
    assert admin(server, "load_lora_adapter", {"lora_name": "sql-c", "lora_path": str(adapters["c"])},
                 key=None).status_code == 401
    bad = admin(server, "load_lora_adapter", {"lora_name": "x", "lora_path": str(adapters["c"] / "nope")})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "lora_path"
    assert admin(server, "load_lora_adapter", {"lora_name": "sql-a", "lora_path": str(adapters["c"])}
                 ).status_code == 400
    assert admin(server, "load_lora_adapter", {"lora_name": "sql-c"}).status_code == 400
    taken = admin(server, "load_lora_adapter", {"lora_name": "sllm-text2sql", "lora_path": str(adapters["c"])})
    assert taken.status_code == 400 and taken.json()["error"]["code"] == "lora_name_reserved"
    broken = files[0] / "broken"
    shutil.copytree(adapters["c"], broken, dirs_exist_ok=True)
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    bad = admin(server, "load_lora_adapter", {"lora_name": "x", "lora_path": str(adapters["c"]),
                                              "base_model_name": "no-such-base"})
    assert bad.status_code == 404 and bad.json()["error"]["param"] == "base_model_name"
    bad = admin(server, "load_lora_adapter", {"lora_name": "x", "lora_path": str(broken)})
    assert bad.status_code == 400 and "cannot be read" in bad.json()["error"]["message"], bad.text
    ok = admin(server, "load_lora_adapter", {"lora_name": "sql-c", "lora_path": str(adapters["c"])})
    assert ok.status_code == 200, ok.text
    assert "sql-c" in {m.id for m in client(server).models.list().data}
    text_c = complete(server, "sql-c")
    assert text_c not in (offline[None], offline["sql-a"])
    assert admin(server, "unload_lora_adapter", {"lora_name": "sql-c"}).status_code == 200
    assert admin(server, "unload_lora_adapter", {"lora_name": "sql-c"}).status_code == 404
    with pytest.raises(openai.NotFoundError):
        complete(server, "sql-c")
    assert complete(server, "sql-a") == offline["sql-a"]
    server.assert_no_leak()


def test_in_use_adapter_cannot_be_unloaded_and_others_are_undisturbed(server, files, offline):
    _, _, adapters = files
    long = {"model": "sql-b", "prompt": PROMPT, "max_tokens": 400, "temperature": 0, "ignore_eos": True,
            "stream": True}
    first_chunk = threading.Event()
    texts: list[str] = []

    def stream() -> None:
        with httpx.stream("POST", f"{server.base_url}/completions", json=long, timeout=120,
                          headers={"authorization": f"Bearer {KEY}"}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    first_chunk.set()
                    texts.append(line)
    t = threading.Thread(target=stream)
    t.start()
    assert first_chunk.wait(60)
    busy = admin(server, "unload_lora_adapter", {"lora_name": "sql-b"})
    assert busy.status_code == 400 and "in flight" in busy.json()["error"]["message"]
    # Another adapter comes and goes while sql-b streams.
    assert admin(server, "load_lora_adapter", {"lora_name": "sql-c",
                                               "lora_path": str(adapters["c"])}).status_code == 200
    assert complete(server, "sql-a") == offline["sql-a"]
    assert admin(server, "unload_lora_adapter", {"lora_name": "sql-c"}).status_code == 200
    t.join(120)
    assert texts and '"finish_reason":"length"' in texts[-1].replace(" ", "")
    server.assert_no_leak()
    assert complete(server, "sql-b") == offline["sql-b"]


def test_lora_settings_from_a_config_file_and_flags(tmp_path):
    from gateway.config_file import load_config
    from gateway.settings import Settings

    file = tmp_path / "sllm.toml"
    file.write_text('enable_lora = true\nmax_loras = 2\nmax_lora_rank = 16\n[lora_modules]\nsql = "/adapters/sql"\n')
    config = Settings(**load_config(file)).engine_config()
    assert (config.enable_lora, config.max_loras, config.max_lora_rank) == (True, 2, 16)
    assert config.lora_modules == {"sql": "/adapters/sql"}
    flags = Settings(lora_modules=["a=/x", "b=/y"]).engine_config()
    assert flags.enable_lora and flags.lora_modules == {"a": "/x", "b": "/y"}  # --lora-modules implies it
    with pytest.raises(ValueError, match="NAME=PATH"):
        Settings(lora_modules=["nopath"])
    with pytest.raises(ValueError, match="unique"):
        Settings(served_model_name="sql", lora_modules=["sql=/x"])
    with pytest.raises(ValueError, match="reserved for the text-to-SQL adapter"):
        Settings(lora_modules=["sllm-text2sql=/x"])


def test_serve_takes_lora_modules_as_vllm_lists_them(monkeypatch):
    """`--lora-modules a=/x b=/y` (vLLM's form) as well as the flag repeated; other extra words are refused."""
    import uvicorn
    from typer.testing import CliRunner

    import gateway.app
    from engine.cli import app

    started = []
    monkeypatch.setattr(gateway.app, "create_app", lambda settings, **_: started.append(settings) or "app")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    for argv in (["--lora-modules", "a=/x", "b=/y", "--max-loras", "2"],
                 ["--lora-modules", "a=/x", "--lora-modules", "b=/y", "--max-loras", "2"]):
        result = CliRunner().invoke(app, ["serve", *argv])
        assert result.exit_code == 0, result.output
        assert started.pop().engine_config().lora_modules == {"a": "/x", "b": "/y"}
    for argv in (["stray"], ["--lora-modules", "a=/x", "stray"]):
        result = CliRunner().invoke(app, ["serve", *argv])
        assert result.exit_code != 0 and "unexpected extra arguments" in result.output, result.output
    assert started == []


def test_a_database_key_may_serve_but_not_administer(files, tmp_path):
    import asyncio

    from gateway.db import Database
    from gateway.tables.api_keys import create_api_key

    _, base, adapters = files

    async def make_key() -> str:
        db = Database(str(tmp_path / "sllm.db"))
        try:
            await db.create_all()
            async with db.sessions() as session:
                return await create_api_key(session, "user")
        finally:
            await db.dispose()

    user_key = asyncio.run(make_key())
    with run_server(tmp_path, model=str(base), served_model_name="tiny", api_keys=[KEY], num_kv_blocks=32,
                    enable_lora=True, max_lora_rank=8) as srv:
        body = {"lora_name": "sql-c", "lora_path": str(adapters["c"])}
        denied = admin(srv, "load_lora_adapter", body, key=user_key)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "insufficient_permissions"
        assert admin(srv, "load_lora_adapter", body).status_code == 200
        assert srv.state.models.models["sql-c"].loaded_by == "admin"  # who loaded it is recorded
        # The server's model: every key uses it; only an admin unloads it.
        assert client(srv, user_key).completions.create(model="sql-c", prompt=PROMPT, max_tokens=2).model == "sql-c"
        denied = admin(srv, "unload_lora_adapter", {"lora_name": "sql-c"}, key=user_key)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "insufficient_permissions"
        # Where the server keeps its files is the admin's to see: a user key gets the folder's name.
        assert client(srv, user_key).models.retrieve("sql-c").root == adapters["c"].name
        assert client(srv, user_key).models.retrieve("tiny").root == base.name
        assert client(srv).models.retrieve("sql-c").root == str(adapters["c"])
        assert admin(srv, "unload_lora_adapter", {"lora_name": "sql-c"}).status_code == 200


def test_unload_races_end_in_404s_not_500s(files):
    """Two unloads of one adapter at once: one succeeds, the other is told it is gone. A request that
    resolved the adapter just before an unload reaches the engine after it: 404 model_not_found, as
    for any other unknown model."""
    from engine import AsyncEngine
    from gateway.registry import ModelRegistry
    from gateway.settings import Settings
    from gateway.web.errors import as_api_error

    _, base, adapters = files
    eng = AsyncEngine(model=str(base), enable_lora=True, max_lora_rank=8, num_kv_blocks=32,
                      lora_modules={"a": str(adapters["a"]), "b": str(adapters["b"])})
    try:
        reg = ModelRegistry.from_settings(Settings(model=str(base), embedding_model="none"), engine=eng)

        async def unload_twice():
            return await asyncio.gather(reg.unload_lora("a"), reg.unload_lora("a"), return_exceptions=True)

        first, second = asyncio.run(unload_twice())
        assert first is None and as_api_error(second).status == 404, second

        async def ask_while_unloading():
            through_b = reg.resolve("b").ready()  # what a handler holds once it resolved `model`
            await reg.unload_lora("b")
            await through_b.generate_full([5, 6, 7], SamplingParams(max_tokens=2))

        with pytest.raises(Exception) as err:
            asyncio.run(ask_while_unloading())
        api = as_api_error(err.value)
        assert (api.status, api.info.code) == (404, "model_not_found"), api.info
        assert eng.list_loras() == [] and set(reg.models) == {eng.served_model_name, f"{eng.served_model_name}-embed"}
    finally:
        eng.shutdown()
