"""Prometheus metrics with vLLM's names under the `sllm:` prefix, every series labelled with its
`model_name` (and, for upstream models, the `upstream` URL).

Engine gauges and counters are read from each embedded engine's `stats()` at scrape time; upstream
counters from each pool's snapshot; per-request latencies are observed by the gateway from each
request's engine-side timestamps (for upstreams, the proxy's own clock). Queue time, TTFT and
preemptions are also kept per engine priority (a `priority` label: gateway/limits/priority.py maps the
kinds of work onto priorities), in series of their own so vLLM's names keep vLLM's labels."""

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import RequestOutput

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class _Families:
    """Metric families built once per scrape, one sample per model (or per model and upstream)."""

    def __init__(self, labels: list[str]):
        self.labels = labels
        self.families: dict[str, Metric] = {}

    def add(self, kind, name: str, doc: str, labels: list[str], value: float) -> None:
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = kind(f"sllm:{name}", doc, labels=self.labels)
        family.add_metric(labels, value)


class EngineCollector(Collector):
    def __init__(self, models):
        self._models = models  # gateway.registry.ModelRegistry

    def collect(self) -> Iterable[Metric]:
        out = _Families(["model_name"])
        by_priority = _Families(["model_name", "priority"])
        for model in self._models.embedded:
            if model.engine is not None:  # still loading: nothing to report yet
                stats = model.engine.stats()
                self._engine(out, model.name, stats)
                for priority, n in sorted(stats.get("preemptions_by_priority", {}).items()):
                    by_priority.add(CounterMetricFamily, "num_preemptions_by_priority",
                                    "Sequences preempted, by their priority.", [model.name, str(priority)], n)
        yield from out.families.values()
        yield from by_priority.families.values()
        up = _Families(["model_name", "upstream"])
        for model in self._models.upstreams:
            for t in model.pool.snapshot():
                labels = [model.name, t["url"]]
                up.add(GaugeMetricFamily, "upstream_requests_outstanding", "Requests in flight to the upstream.",
                        labels, t["outstanding"])
                up.add(GaugeMetricFamily, "upstream_healthy", "1 while the upstream is in service, 0 while it "
                        "is taken out after failures.", labels, float(bool(t["healthy"])))
                up.add(CounterMetricFamily, "upstream_requests", "Requests sent to the upstream.", labels,
                        t["requests"])
                up.add(CounterMetricFamily, "upstream_failures", "Connection errors, timeouts and 502-504 answers "
                        "from the upstream.", labels, t["failures"])
                up.add(CounterMetricFamily, "upstream_retries", "Requests retried after an upstream failure.",
                        labels, t.get("retries", 0))
        yield from up.families.values()

    @staticmethod
    def _engine(out: _Families, model: str, stats: dict[str, Any]) -> None:
        m = [model]

        def gauge(name: str, doc: str, value: float) -> None:
            out.add(GaugeMetricFamily, name, doc, m, value)

        def counter(name: str, doc: str, value: float) -> None:
            out.add(CounterMetricFamily, name, doc, m, value)

        gauge("num_requests_running", "Sequences in the running batch.", stats["num_running"])
        gauge("num_requests_waiting", "Sequences waiting to be scheduled.", stats["num_waiting"])
        gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", stats["kv_usage"])
        gauge("num_free_kv_blocks", "KV cache blocks free.", stats["num_free_blocks"])
        counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", stats["prefix_queries"])
        counter("prefix_cache_hits", "Prompt tokens served from the prefix cache.", stats["prefix_hits"])
        counter("num_preemptions", "Sequences preempted for lack of KV blocks.", stats["num_preemptions"])
        counter("prompt_tokens", "Prefill tokens processed.", stats["prompt_tokens"])
        counter("generation_tokens", "Tokens generated.", stats["generation_tokens"])
        spec = stats.get("spec")
        if spec:
            counter("spec_decode_num_draft_tokens", "Speculative draft tokens proposed.", spec["proposed"])
            counter("spec_decode_num_accepted_tokens", "Draft tokens accepted by the target.", spec["accepted"])
            counter("spec_decode_num_drafts", "Sequence-steps that verified drafts.", spec["verified_seqs"])
            gauge("spec_decode_draft_acceptance_rate", "Accepted / proposed draft tokens.", spec["acceptance_rate"])
            gauge("spec_decode_mean_accepted_length", "Tokens emitted per verified sequence-step.",
                  spec["mean_accepted_length"])


class Metrics:
    """One registry per app, so several servers in one process (tests) never collide."""

    def __init__(self, models):
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        r = self.registry

        def hist(name: str, doc: str, buckets=LATENCY_BUCKETS) -> Histogram:
            return Histogram(f"sllm:{name}", doc, labels, buckets=buckets, registry=r)

        self.ttft = hist("time_to_first_token_seconds", "Time to first token.")
        self.itl = hist("inter_token_latency_seconds", "Time between consecutive output tokens.")
        self.tpot = hist("request_time_per_output_token_seconds", "Mean time per output token of a request.")
        self.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency.")
        self.queue = hist("request_queue_time_seconds", "Time from arrival to first scheduling.")
        self.ttft_by_priority = Histogram("sllm:time_to_first_token_by_priority_seconds",
                                          "Time to first token, by engine priority.", labels + ["priority"],
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.queue_by_priority = Histogram("sllm:request_queue_time_by_priority_seconds",
                                           "Time from arrival to first scheduling, by engine priority.",
                                           labels + ["priority"], buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_len = hist("request_prompt_tokens", "Prompt tokens per request.", TOKEN_BUCKETS)
        self.gen_len = hist("request_generation_tokens", "Generated tokens per request.", TOKEN_BUCKETS)
        self.spec_acceptance = Histogram("sllm:request_spec_acceptance_rate",
                                         "Per-request fraction of speculative draft tokens accepted.", labels,
                                         buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), registry=r)
        self.success = Counter("sllm:request_success", "Finished sequences by finish reason.",
                               labels + ["finished_reason"], registry=r)
        self.upstream_ttfb = hist("upstream_time_to_first_byte_seconds",
                                  "Time until an upstream model's stream opened (proxy clock).")
        self.upstream_e2e = hist("upstream_request_latency_seconds",
                                 "End-to-end latency of requests forwarded to an upstream model (proxy clock).")
        # The database's backlog (gateway/jobs/backlog.py), read at each scrape.
        self.job_backlog = Gauge("sllm:job_backlog", "Job work waiting in the database (the same on every replica "
                                 "of it): batch lines without a result, background responses, schedule runs.",
                                 ["kind"], registry=r)
        r.register(EngineCollector(models))

    def observe_backlog(self, counts: dict[str, int]) -> None:
        for kind, n in counts.items():
            self.job_backlog.labels(kind).set(n)

    def observe_upstream(self, model: str, what: str, seconds: float) -> None:
        (self.upstream_ttfb if what == "ttfb" else self.upstream_e2e).labels(model).observe(seconds)

    def observe_output(self, out: RequestOutput, prev_last_token_time: float | None, model: str) -> None:
        """Called for every output the engine streams; latencies come from the engine's clock."""
        m = out.metrics
        new_tokens = max((len(o.delta_token_ids) for o in out.outputs), default=0)
        if prev_last_token_time is None and m.ttft is not None:
            self.ttft.labels(model).observe(m.ttft)
            self.ttft_by_priority.labels(model, str(m.priority)).observe(m.ttft)
        elif prev_last_token_time is not None and new_tokens and m.last_token_time is not None:
            gap = (m.last_token_time - prev_last_token_time) / new_tokens
            for _ in range(new_tokens):
                self.itl.labels(model).observe(gap)
        if out.finished:
            self._observe_finished(out, model)

    def _observe_finished(self, out: RequestOutput, model: str) -> None:
        m = out.metrics
        for value, hist in ((m.e2e, self.e2e), (m.queue_time, self.queue), (m.tpot, self.tpot)):
            if value is not None:
                hist.labels(model).observe(value)
        if m.queue_time is not None:
            self.queue_by_priority.labels(model, str(m.priority)).observe(m.queue_time)
        if m.spec_acceptance_rate is not None:
            self.spec_acceptance.labels(model).observe(m.spec_acceptance_rate)
        self.prompt_len.labels(model).observe(len(out.prompt_token_ids))
        self.gen_len.labels(model).observe(out.num_output_tokens)
        for o in out.outputs:
            self.success.labels(model, o.finish_reason or "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
