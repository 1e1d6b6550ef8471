"""SLLMText2SQL and sllm_chat_openai against a small real HTTP server on a loopback port: a FastAPI
app standing in for the gateway's /text2sql and /v1/models routes, answering from a real SQLite
database, so the tool's requests, auth and error handling go over the wire."""

import asyncio
import socket
import sqlite3
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI

from integrations.langchain import SLLMText2SQL, sllm_chat_openai

KEY = "sk-test"


def _app(seen: list[dict]) -> FastAPI:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript("CREATE TABLE users (id INTEGER, name TEXT);"
                     "INSERT INTO users VALUES (1, 'alice'), (2, 'bob'), (3, 'carol');")
    app = FastAPI()

    def refuse(status: int, message: str, param: str | None = None) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "param": param,
                                       "code": None}}, status_code=status)

    @app.get("/v1/models")
    def models(request: Request):
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return refuse(401, "bad key")
        return {"object": "list", "data": [{"id": "tiny-model", "object": "model", "owned_by": "sllm"}]}

    @app.post("/text2sql")
    async def text2sql(request: Request):
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("authorization")})
        if body.get("source") != "shop":
            return refuse(404, f"unknown source {body.get('source')!r}", "source")
        sql = "SELECT id, name FROM users ORDER BY id"
        result = {"question": body["question"], "source": "shop", "sql": sql, "valid": True,
                  "executed": body["execute"], "columns": [], "rows": [], "row_count": 0, "truncated": False,
                  "error": None}
        if body["execute"]:
            cur = db.execute(sql)
            rows = cur.fetchall()
            result.update(columns=[d[0] for d in cur.description], rows=[list(r) for r in rows[: body["max_rows"]]],
                          row_count=min(len(rows), body["max_rows"]), truncated=len(rows) > body["max_rows"])
        return result

    return app


@pytest.fixture(scope="module")
def server():
    seen: list[dict] = []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(_app(seen), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}", seen
    srv.should_exit = True
    thread.join(timeout=5)


def test_text2sql_tool_sends_the_request_and_returns_sql_and_rows(server):
    url, seen = server
    tool = SLLMText2SQL(base_url=url, api_key=KEY, source="shop", max_rows=2)
    text = tool.invoke({"question": "Who are the users?"})
    assert seen[-1] == {"body": {"source": "shop", "question": "Who are the users?", "execute": True, "max_rows": 2},
                        "auth": f"Bearer {KEY}"}
    assert "SQL: SELECT id, name FROM users ORDER BY id" in text
    assert "[1, 'alice']" in text and "[2, 'bob']" in text and "carol" not in text and "(truncated)" in text


def test_text2sql_tool_as_a_tool_call_carries_the_full_result(server):
    url, _ = server
    tool = SLLMText2SQL(base_url=url, source="shop")
    msg = tool.invoke({"name": tool.name, "args": {"question": "List users"}, "id": "call_1", "type": "tool_call"})
    assert isinstance(msg, ToolMessage) and msg.tool_call_id == "call_1"
    assert msg.artifact["rows"] == [[1, "alice"], [2, "bob"], [3, "carol"]]
    assert "SQL:" in msg.content


def test_text2sql_tool_async_and_without_execution(server):
    url, seen = server
    tool = SLLMText2SQL(base_url=url, execute=False)
    text = asyncio.run(tool.ainvoke({"question": "Count users", "source": "shop"}))
    assert seen[-1]["body"]["execute"] is False and seen[-1]["auth"] is None
    assert "(not executed)" in text


def test_text2sql_tool_reports_server_errors_to_the_agent(server):
    url, _ = server
    text = SLLMText2SQL(base_url=url, source="nope").invoke({"question": "x"})
    assert "404" in text and "unknown source 'nope'" in text
    assert "no database source" in SLLMText2SQL(base_url=url).invoke({"question": "x"})
    assert "request failed" in SLLMText2SQL(base_url="http://127.0.0.1:9", source="shop", timeout=2).invoke(
        {"question": "x"})


def test_sllm_chat_openai_is_configured_for_the_server(server):
    url, _ = server
    llm = sllm_chat_openai(f"{url}/v1", api_key=KEY)
    assert isinstance(llm, ChatOpenAI)
    assert llm.model_name == "tiny-model"  # the server's first model
    assert llm.stream_usage is True
    assert llm.openai_api_base == f"{url}/v1"
    assert llm.openai_api_key.get_secret_value() == KEY
    named = sllm_chat_openai(f"{url}/v1", model="other", temperature=0, max_tokens=5)
    assert named.model_name == "other" and named.temperature == 0 and named.max_tokens == 5
    with pytest.raises(httpx.HTTPStatusError):
        sllm_chat_openai(f"{url}/v1", api_key="wrong")
