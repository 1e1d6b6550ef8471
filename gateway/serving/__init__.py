"""The serving layer: what each OpenAI endpoint does, callable without HTTP (routers, batch lines,
background responses and schedules all call it; gateway/jobs import it, never a router)."""
