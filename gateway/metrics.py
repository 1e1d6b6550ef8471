"""Prometheus metrics with vLLM's names under the `sllm:` prefix.

Engine gauges and counters are read from `engine.stats()` at scrape time; per-request latencies
are observed by the gateway from each request's engine-side timestamps."""

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import RequestOutput

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                   10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class EngineCollector(Collector):
    def __init__(self, get_stats: Callable[[], dict[str, Any] | None], get_model: Callable[[], str]):
        self._stats = get_stats
        self._model = get_model

    def collect(self) -> Iterable[Metric]:
        stats = self._stats()
        if stats is None:  # still loading: nothing to report yet
            return
        m = [self._model()]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(f"sllm:{name}", doc, labels=["model_name"])
            g.add_metric(m, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(f"sllm:{name}", doc, labels=["model_name"])
            c.add_metric(m, value)
            return c

        yield gauge("num_requests_running", "Sequences in the running batch.", stats["num_running"])
        yield gauge("num_requests_waiting", "Sequences waiting to be scheduled.", stats["num_waiting"])
        yield gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", stats["kv_usage"])
        yield gauge("num_free_kv_blocks", "KV cache blocks free.", stats["num_free_blocks"])
        yield counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", stats["prefix_queries"])
        yield counter("prefix_cache_hits", "Prompt tokens served from the prefix cache.", stats["prefix_hits"])
        yield counter("num_preemptions", "Sequences preempted for lack of KV blocks.", stats["num_preemptions"])
        yield counter("prompt_tokens", "Prefill tokens processed.", stats["prompt_tokens"])
        yield counter("generation_tokens", "Tokens generated.", stats["generation_tokens"])
        spec = stats.get("spec")
        if spec:
            yield counter("spec_decode_num_draft_tokens", "Speculative draft tokens proposed.", spec["proposed"])
            yield counter("spec_decode_num_accepted_tokens", "Draft tokens accepted by the target.", spec["accepted"])
            yield counter("spec_decode_num_drafts", "Sequence-steps that verified drafts.", spec["verified_seqs"])
            yield gauge("spec_decode_draft_acceptance_rate", "Accepted / proposed draft tokens.", spec["acceptance_rate"])
            yield gauge("spec_decode_mean_accepted_length", "Tokens emitted per verified sequence-step.",
                        spec["mean_accepted_length"])


class Metrics:
    """One registry per app, so several servers in one process (tests) never collide."""

    def __init__(self, get_stats: Callable[[], dict[str, Any] | None], get_model: Callable[[], str]):
        self.registry = CollectorRegistry()
        self.model = get_model
        labels = ["model_name"]
        r = self.registry

        def hist(name: str, doc: str, buckets=LATENCY_BUCKETS) -> Histogram:
            return Histogram(f"sllm:{name}", doc, labels, buckets=buckets, registry=r)

        self.ttft = hist("time_to_first_token_seconds", "Time to first token.")
        self.itl = hist("inter_token_latency_seconds", "Time between consecutive output tokens.")
        self.tpot = hist("request_time_per_output_token_seconds", "Mean time per output token of a request.")
        self.e2e = hist("e2e_request_latency_seconds", "End-to-end request latency.")
        self.queue = hist("request_queue_time_seconds", "Time from arrival to first scheduling.")
        self.prompt_len = hist("request_prompt_tokens", "Prompt tokens per request.", TOKEN_BUCKETS)
        self.gen_len = hist("request_generation_tokens", "Generated tokens per request.", TOKEN_BUCKETS)
        self.spec_acceptance = Histogram("sllm:request_spec_acceptance_rate",
                                         "Per-request fraction of speculative draft tokens accepted.", labels,
                                         buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), registry=r)
        self.success = Counter("sllm:request_success", "Finished sequences by finish reason.",
                               labels + ["finished_reason"], registry=r)
        r.register(EngineCollector(get_stats, get_model))

    def observe_output(self, out: RequestOutput, prev_last_token_time: float | None) -> None:
        """Called for every output the engine streams; latencies come from the engine's clock."""
        m, model = out.metrics, self.model()
        new_tokens = max((len(o.delta_token_ids) for o in out.outputs), default=0)
        if prev_last_token_time is None and m.ttft is not None:
            self.ttft.labels(model).observe(m.ttft)
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
        if m.spec_acceptance_rate is not None:
            self.spec_acceptance.labels(model).observe(m.spec_acceptance_rate)
        self.prompt_len.labels(model).observe(len(out.prompt_token_ids))
        self.gen_len.labels(model).observe(out.num_output_tokens)
        for o in out.outputs:
            self.success.labels(model, o.finish_reason or "abort").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
