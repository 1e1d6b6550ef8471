"""SLLMText2SQL: a LangChain tool that asks an sllm server's text-to-SQL endpoint.

The server generates the SQL with its own model (constrained to the source's schema), validates
it and runs it read-only; the tool hands an agent the SQL and the rows as text, and the whole
response as the tool message's artifact for code that wants the structured result."""

from typing import Any

import httpx
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field, SecretStr


class Text2SQLInput(BaseModel):
    question: str = Field(description="The question to answer from the database, in plain language.")
    source: str | None = Field(default=None, description="The database source to query; omit for the default.")


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error")
    except ValueError:
        err = None
    message = err.get("message") if isinstance(err, dict) else None
    return f"text2sql request failed ({resp.status_code}): {message or resp.text[:300]}"


def summarize(result: dict[str, Any], max_rows_shown: int = 20) -> str:
    """The part of a /text2sql response an agent reads: SQL, then rows or the error."""
    lines = [f"SQL: {result.get('sql', '')}"]
    error = result.get("error")
    if error:
        lines.append(f"error: {error.get('message', error) if isinstance(error, dict) else error}")
        return "\n".join(lines)
    if not result.get("executed", True):
        lines.append("(not executed)")
        return "\n".join(lines)
    rows = result.get("rows") or []
    count = result.get("row_count", len(rows))
    lines.append(f"columns: {', '.join(map(str, result.get('columns') or []))}")
    more = " (truncated)" if result.get("truncated") else ""
    lines.append(f"rows: {count}{more}")
    lines += [str(list(r) if isinstance(r, list | tuple) else r) for r in rows[:max_rows_shown]]
    if len(rows) > max_rows_shown:
        lines.append(f"... {len(rows) - max_rows_shown} more")
    return "\n".join(lines)


class SLLMText2SQL(BaseTool):
    """Answers questions from a database through an sllm server's `POST {base_url}/text2sql`."""

    name: str = "sllm_text2sql"
    description: str = (
        "Answer a question from a SQL database. Input: the question in plain language. "
        "Returns the SQL that was run and the resulting rows."
    )
    args_schema: type[BaseModel] = Text2SQLInput
    response_format: str = "content_and_artifact"
    # A failed request (unknown source, bad key) is told to the agent rather than ending its run.
    handle_tool_error: bool = True

    base_url: str
    """Where the server mounts the route, e.g. "http://localhost:8000" for /text2sql."""
    api_key: SecretStr | None = None
    source: str | None = None
    """The source used when the caller names none."""
    execute: bool = True
    max_rows: int = 100
    timeout: float = 120.0

    def _payload(self, question: str, source: str | None) -> dict[str, Any]:
        chosen = source or self.source
        if not chosen:
            raise ToolException("no database source: pass `source` or set it on the tool")
        return {"source": chosen, "question": question, "execute": self.execute, "max_rows": self.max_rows}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key.get_secret_value()}"} if self.api_key else {}

    def _url(self) -> str:
        return f"{self.base_url.rstrip('/')}/text2sql"

    def _result(self, resp: httpx.Response) -> tuple[str, dict[str, Any]]:
        if resp.status_code >= 400:
            raise ToolException(_error_message(resp))
        result = resp.json()
        return summarize(result), result

    def _run(self, question: str, source: str | None = None, **_: Any) -> tuple[str, dict[str, Any]]:
        try:
            resp = httpx.post(self._url(), json=self._payload(question, source), headers=self._headers(),
                              timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise ToolException(f"text2sql request failed: {exc}") from exc
        return self._result(resp)

    async def _arun(self, question: str, source: str | None = None, **_: Any) -> tuple[str, dict[str, Any]]:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                resp = await client.post(self._url(), json=self._payload(question, source), headers=self._headers())
        except httpx.HTTPError as exc:
            raise ToolException(f"text2sql request failed: {exc}") from exc
        return self._result(resp)
