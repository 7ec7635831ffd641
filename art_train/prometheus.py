"""Prometheus metrics for `art serve` at ``GET /metrics``.

    art_http_requests_total{method,route,status}        requests answered
    art_http_request_duration_seconds{route}            latency histogram
    art_chat_requests_in_progress                       chat completions being handled now
    art_queue_depth                                     chat completions not yet admitted to an engine
    art_engine_inflight{model}                          chat completions admitted to the engine
    art_completion_tokens_total{model}, art_prompt_tokens_total{model}
    art_tokens_per_second{model}                        completion tokens/s over the last 60 s
    art_held{model}, art_held_seconds_total{model}      inference held for training (now; in all)
    art_step{model}                                     the newest checkpoint served
    art_replica_up{engine,replica}                      1 while an engine replica serves (--replicas N)
    art_replica_inflight{engine,replica}                requests on the replica now
    art_replica_requests_total{engine,replica}          requests it answered
    art_replica_failures_total{engine,replica}          times taken out: died, dropped a request, failed the check
    art_replica_restarts_total{engine,replica}          times it came back (verified before serving)

One registry per app (tests and `LocalBackend` may run several). Routes are labelled by their
template (``/art/v1/models/{name}/train``), so label sets stay small.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

__all__ = ["ServerMetrics", "install_metrics"]

logger = logging.getLogger(__name__)

WINDOW_S = 60.0


class ServerMetrics:
    """The counters an app updates and the gauges read from its service at scrape time."""

    def __init__(self, service: Any) -> None:
        import prometheus_client as prom
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self.service = service
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self.requests = prom.Counter("art_http_requests", "HTTP requests answered", ["method", "route", "status"],
                                     registry=self.registry)
        self.latency = prom.Histogram("art_http_request_duration_seconds", "HTTP request latency", ["route"],
                                      registry=self.registry,
                                      buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
        self.in_progress = prom.Gauge("art_chat_requests_in_progress", "chat completions being handled",
                                      registry=self.registry)
        self.completion_tokens = prom.Counter("art_completion_tokens", "completion tokens served", ["model"],
                                              registry=self.registry)
        self.prompt_tokens = prom.Counter("art_prompt_tokens", "prompt tokens served", ["model"], registry=self.registry)
        self.tool_parse_errors = prom.Counter(
            "art_tool_parse_errors", "replies whose text looked like a tool call but did not parse (kept as content)",
            ["model"], registry=self.registry)
        self._recent: dict[str, collections.deque[tuple[float, int]]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()
        self._chat_now = 0
        self.routes: list[Any] = []
        metrics = self

        class _Service:
            def collect(self) -> Any:
                return metrics._service_families(GaugeMetricFamily, CounterMetricFamily)

        self.registry.register(_Service())
        self._generate = prom.generate_latest
        self.content_type = prom.CONTENT_TYPE_LATEST

    # -- updated by the server -----------------------------------------------------------------
    def completion(self, served: str, body: dict[str, Any]) -> None:
        """A non-streamed chat completion was answered: count its tokens."""
        usage = body.get("usage") or {}
        self._tokens(served, int(usage.get("completion_tokens") or 0), int(usage.get("prompt_tokens") or 0))
        self._parse_errors(served, body)

    def _parse_errors(self, served: str, body: dict[str, Any]) -> None:
        n = sum(1 for c in body.get("choices") or [] if c.get("tool_parse_error"))
        if n:
            self.tool_parse_errors.labels(served.partition("@")[0]).inc(n)

    def stream_chunk(self, served: str, chunk: dict[str, Any]) -> None:
        """A streamed chunk: its token ids (ART's server sends them) or one per content delta."""
        n = 0
        for c in chunk.get("choices") or []:
            ids = c.get("token_ids")
            n += len(ids) if ids is not None else int(bool((c.get("delta") or {}).get("content")))
        self._tokens(served, n, 0)
        self._parse_errors(served, chunk)

    def _tokens(self, served: str, completion: int, prompt: int) -> None:
        model = served.partition("@")[0]
        if completion:
            self.completion_tokens.labels(model).inc(completion)
            with self._lock:
                self._recent[model].append((time.monotonic(), completion))
        if prompt:
            self.prompt_tokens.labels(model).inc(prompt)

    def tokens_per_second(self, model: str) -> float:
        now = time.monotonic()
        with self._lock:
            recent = self._recent[model]
            while recent and recent[0][0] < now - WINDOW_S:
                recent.popleft()
            return sum(n for _, n in recent) / WINDOW_S

    # -- read at scrape time -------------------------------------------------------------------
    def _service_families(self, gauge: Any, counter: Any) -> list[Any]:
        inflight = gauge("art_engine_inflight", "chat completions admitted to the engine", labels=["model"])
        held = gauge("art_held", "1 while inference is held for training", labels=["model"])
        held_s = counter("art_held_seconds", "seconds inference was held for training", labels=["model"])
        step = gauge("art_step", "newest checkpoint step served", labels=["model"])
        tps = gauge("art_tokens_per_second", f"completion tokens per second over the last {WINDOW_S:.0f} s",
                    labels=["model"])
        admitted = 0
        for name, entry in sorted(dict(getattr(self.service, "_entries", {})).items()):
            gate = entry.gate
            n = int(getattr(gate, "_inflight", 0))
            admitted += n
            inflight.add_metric([name], n)
            held.add_metric([name], 1.0 if gate.held else 0.0)
            held_s.add_metric([name], float(gate.held_seconds()) if hasattr(gate, "held_seconds") else 0.0)
            step.add_metric([name], float(entry.step or 0))
            tps.add_metric([name], self.tokens_per_second(name))
        depth = gauge("art_queue_depth", "chat completions received but not yet admitted to an engine "
                      "(waiting while training holds inference)")
        depth.add_metric([], max(0, self._chat_now - admitted))
        return [depth, inflight, held, held_s, step, tps, *self._replica_families(gauge, counter)]

    def _replica_families(self, gauge: Any, counter: Any) -> list[Any]:
        sets = self.service.replica_sets() if hasattr(self.service, "replica_sets") else []
        if not sets:
            return []
        labels = ["engine", "replica"]
        up = gauge("art_replica_up", "1 while the engine replica serves", labels=labels)
        inflight = gauge("art_replica_inflight", "requests on the engine replica now", labels=labels)
        served = counter("art_replica_requests", "requests the engine replica answered", labels=labels)
        failures = counter("art_replica_failures", "times the engine replica was taken out (it died, dropped a "
                           "request or failed the weight-sync check)", labels=labels)
        restarts = counter("art_replica_restarts", "times the engine replica came back, verified", labels=labels)
        for replica_set in sets:
            for r in replica_set.replicas:
                key = [str(replica_set.name), str(r.index)]
                up.add_metric(key, float(r.up))
                inflight.add_metric(key, r.inflight)
                served.add_metric(key, r.served)
                failures.add_metric(key, r.failures)
                restarts.add_metric(key, r.restarts)
        return [up, inflight, served, failures, restarts]

    def render(self) -> bytes:
        return self._generate(self.registry)


class _Middleware:
    """Pure ASGI (no per-request task, unlike BaseHTTPMiddleware): counts and times each request."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    def _template(self, scope: dict[str, Any]) -> str:
        """The route template of a request answered before routing (a 401), or "unmatched"."""
        from starlette.routing import Match

        for route in self.metrics.routes:
            if route.matches(scope)[0] != Match.NONE:
                return getattr(route, "path", "unmatched")
        return "unmatched"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m = self.metrics
        status = [500]
        chat = scope["path"].endswith("/chat/completions")

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        t0 = time.perf_counter()
        if chat:
            m._chat_now += 1
            m.in_progress.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            if chat:
                m._chat_now -= 1
                m.in_progress.dec()
            route = getattr(scope.get("route"), "path", None) or self._template(scope)
            m.requests.labels(scope["method"], route, str(status[0])).inc()
            m.latency.labels(route).observe(time.perf_counter() - t0)


def install_metrics(app: Any, service: Any) -> ServerMetrics | None:
    """Add ``GET /metrics`` and the request middleware to `app`; None (and a 501 route) without prometheus-client."""
    from fastapi.responses import PlainTextResponse, Response

    try:
        metrics = ServerMetrics(service)
    except ImportError:
        logger.info("prometheus-client is not installed; /metrics answers 501")

        @app.get("/metrics")
        async def no_metrics() -> Response:
            return PlainTextResponse("prometheus-client is not installed: pip install 'art-rl[train]'", status_code=501)

        return None

    @app.get("/metrics")
    async def scrape() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    metrics.routes = app.router.routes
    app.add_middleware(_Middleware, metrics=metrics)
    app.state.metrics = metrics
    return metrics
