"""HTTP plumbing: error responses, middleware and the access log, FastAPI dependencies, SSE framing, pagination, OpenAPI links."""
