"""OpenAPI links from the operations that create an object to those that take its id (files, batches,
responses, text-to-SQL sources and schedules, models), added to FastAPI's generated document. Clients'
code generators and API explorers follow them, and so does the fuzzing test (schemathesis's stateful
phase), which otherwise only ever reaches a 404 on the id operations."""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

# creator (path, method) -> the id's place in its answer, and the (path, method) operations that take it
LINKS: dict[tuple[str, str], tuple[str, list[tuple[str, str]]]] = {
    ("/v1/files", "post"): ("$response.body#/id", [
        ("/v1/files/{file_id}", "get"), ("/v1/files/{file_id}/content", "get"), ("/v1/files/{file_id}", "delete")]),
    ("/v1/batches", "post"): ("$response.body#/id", [
        ("/v1/batches/{batch_id}", "get"), ("/v1/batches/{batch_id}/cancel", "post")]),
    ("/v1/responses", "post"): ("$response.body#/id", [
        ("/v1/responses/{response_id}", "get"), ("/v1/responses/{response_id}/cancel", "post"),
        ("/v1/responses/{response_id}", "delete")]),
    ("/v1/text2sql/sources", "post"): ("$response.body#/name", [
        ("/v1/text2sql/sources/{name}", "get"), ("/v1/text2sql/sources/{name}", "delete")]),
    ("/v1/text2sql/schedules", "post"): ("$response.body#/id", [
        ("/v1/text2sql/schedules/{schedule_id}", "get"), ("/v1/text2sql/schedules/{schedule_id}/runs", "get"),
        ("/v1/text2sql/schedules/{schedule_id}", "delete")]),
    ("/v1/models", "get"): ("$response.body#/data/0/id", [("/v1/models/{model_id}", "get")]),
}


def _pointer(path: str, method: str) -> str:
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def add_links(schema: dict[str, Any]) -> dict[str, Any]:
    paths = schema.get("paths", {})
    for (path, method), (source, targets) in LINKS.items():
        ok = paths.get(path, {}).get(method, {}).get("responses", {}).get("200")
        if ok is None:
            continue
        links = ok.setdefault("links", {})
        for target, target_method in targets:
            params = [p["name"] for p in paths.get(target, {}).get(target_method, {}).get("parameters", [])
                      if p.get("in") == "path"]
            if params:
                name = f"{target_method}_{target.rsplit('/', 1)[-1].strip('{}')}".replace("-", "_")
                links[name] = {"operationRef": _pointer(target, target_method), "parameters": {params[0]: source}}
    return schema


def install(app: FastAPI) -> None:
    """Makes `app.openapi()` return the generated document with the links (built once, then cached)."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(get_openapi(title=app.title, version=app.version, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
