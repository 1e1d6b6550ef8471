"""HTTP plumbing: error responses, middleware, access log, FastAPI dependencies, SSE, pagination, OpenAPI links."""
