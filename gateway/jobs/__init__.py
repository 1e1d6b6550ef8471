"""Jobs that survive restarts: batches (`batches.py`), background responses (`responses.py`), the
runner that executes both inside the server below interactive requests by engine priority
(`runner.py`; `gate.py` bounds how many are in the engine at once),
webhooks (`webhooks.py`), idempotency keys (`idempotency.py`), leases between replicas
(`leases.py`), the text-to-SQL schedules' cron scheduler (`schedules.py`) and the backlog /metrics
reports (`backlog.py`). Their state is rows in the
gateway's database (`gateway/tables/`); the HTTP routes are `gateway/routers/files.py`,
`batches.py` and `responses.py`."""
