from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from cursor_byok.llm.types import Usage
from cursor_byok.observability.metrics import Metrics, cache_hit_ratio, rpc_label
from cursor_byok.transport.runtime.summary import RunSummary

from .helpers import call_record


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_own_registry_not_the_global_one() -> None:
    m = Metrics()
    m.observe_rpc("/agent.v1.AgentService/Run", "ok")
    assert m.registry is not REGISTRY
    global_names = {f.name for f in REGISTRY.collect()}
    assert not any(n.startswith("cursor_byok") for n in global_names)
    Metrics()  # a second instance must not clash (tests, several apps in one process)


def test_rpc_counter_and_label_normalisation() -> None:
    m = Metrics()
    m.observe_rpc("/agent.v1.AgentService/Run", "ok")
    m.observe_rpc("/agent.v1.AgentService/Run", "ok")
    m.observe_rpc("/agent.v1.AgentService/Run", "unauthenticated")
    m.observe_rpc("/../../etc/passwd", "not_found")
    name = "cursor_byok_rpc_requests_total"
    assert value(m, name, rpc="agent.v1.AgentService/Run", outcome="ok") == 2
    assert value(m, name, rpc="agent.v1.AgentService/Run", outcome="unauthenticated") == 1
    assert value(m, name, rpc="other", outcome="not_found") == 1
    assert rpc_label("/aiserver.v1.BidiService/BidiAppend") == "aiserver.v1.BidiService/BidiAppend"


def test_rpc_label_set_is_bounded() -> None:
    m = Metrics()
    for i in range(300):
        m.observe_rpc(f"/x.v1.S/M{i}", "unimplemented")
    rpcs = {dict(k[1]).get("rpc") for k in samples(m) if k[0] == "cursor_byok_rpc_requests_total"}
    assert len(rpcs) <= 201 and "other" in rpcs


def test_active_runs_gauge_inc_dec_and_callback() -> None:
    m = Metrics()
    m.run_started()
    m.run_started()
    m.run_finished()
    assert value(m, "cursor_byok_active_runs") == 1
    live = {"n": 7}
    cb = Metrics(active_runs=lambda: live["n"])
    assert value(cb, "cursor_byok_active_runs") == 7
    live["n"] = 3
    assert value(cb, "cursor_byok_active_runs") == 3


def test_llm_call_counters_tokens_cost_histograms() -> None:
    m = Metrics()
    m.observe_llm_call(call_record("a", ttft_ms=250, duration_ms=1200, cost_usd=0.25))
    m.observe_llm_call(
        call_record(
            "b",
            status="failed",
            ttft_ms=None,
            duration_ms=40,
            cost_usd=None,
            input_tokens=0,
            output_tokens=0,
            cache_read=0,
            reasoning=0,
            error="boom",
        )
    )
    lab = {"provider": "openai", "model": "gpt-test"}
    assert value(m, "cursor_byok_llm_calls_total", outcome="ok", **lab) == 1
    assert value(m, "cursor_byok_llm_calls_total", outcome="error", **lab) == 1
    assert value(m, "cursor_byok_llm_tokens_total", kind="input", **lab) == 100
    assert value(m, "cursor_byok_llm_tokens_total", kind="output", **lab) == 20
    assert value(m, "cursor_byok_llm_tokens_total", kind="cache_read", **lab) == 300
    assert value(m, "cursor_byok_llm_tokens_total", kind="cache_write", **lab) == 0
    assert value(m, "cursor_byok_llm_tokens_total", kind="reasoning", **lab) == 5
    assert value(m, "cursor_byok_llm_cost_usd_total", **lab) == 0.25
    # "b" was stored without a cost (its model had no prices): unpriced, not $0.
    assert value(m, "cursor_byok_llm_unpriced_calls_total", **lab) == 1
    assert value(m, "cursor_byok_llm_ttft_seconds_count", **lab) == 1
    assert value(m, "cursor_byok_llm_ttft_seconds_sum", **lab) == 0.25
    assert value(m, "cursor_byok_llm_ttft_seconds_bucket", le="0.25", **lab) == 1
    assert value(m, "cursor_byok_llm_ttft_seconds_bucket", le="0.1", **lab) == 0
    assert value(m, "cursor_byok_llm_duration_seconds_count", **lab) == 2
    assert value(m, "cursor_byok_llm_duration_seconds_bucket", le="0.25", **lab) == 1


def test_only_final_records_count_and_each_call_once() -> None:
    m = Metrics()
    m.observe_llm_call(call_record("a", status="planned"))
    m.observe_llm_call(call_record("a", status="streaming"))
    assert (
        value(m, "cursor_byok_llm_calls_total", provider="openai", model="gpt-test", outcome="ok")
        is None
    )
    m.observe_llm_call(call_record("a"))
    m.observe_llm_call(call_record("a"))  # the same final record reported twice
    m.observe_llm_call(call_record("c", status="canceled"))
    lab = {"provider": "openai", "model": "gpt-test"}
    assert value(m, "cursor_byok_llm_calls_total", outcome="ok", **lab) == 1
    assert value(m, "cursor_byok_llm_calls_total", outcome="canceled", **lab) == 1
    assert value(m, "cursor_byok_llm_tokens_total", kind="input", **lab) == 200


def test_no_since_start_cache_ratio_gauge_but_the_counters_that_derive_it() -> None:
    """A ratio since start says nothing about the last hour: /metrics exports the token
    counters, and the PromQL in docs/operations.md derives the ratio over any window."""
    m = Metrics()
    m.observe_llm_call(call_record("a", input_tokens=100, cache_read=300, cache_write=100))
    m.observe_llm_call(call_record("b", input_tokens=100, cache_read=500, cache_write=0))
    assert not any("cache_hit" in name for name, _ in samples(m))
    lab = {"provider": "openai", "model": "gpt-test"}
    tokens = {
        kind: value(m, "cursor_byok_llm_tokens_total", kind=kind, **lab)
        for kind in ("input", "cache_read", "cache_write")
    }
    assert tokens == {"input": 200, "cache_read": 800, "cache_write": 100}
    # The documented query, over these counters: cache_read / (input + cache_read + cache_write).
    assert cache_hit_ratio(200, 800, 100) == 800 / 1100
    assert cache_hit_ratio(0, 0, 0) is None


def test_the_documented_cache_ratio_query_names_real_series() -> None:
    from tests.paths import REPO

    doc = (REPO / "docs" / "operations.md").read_text()
    assert "cursor_byok_llm_cache_hit_ratio" not in doc
    assert 'cursor_byok_llm_tokens_total{kind="cache_read"}' in doc
    assert 'cursor_byok_llm_tokens_total{kind=~"input|cache_read|cache_write"}' in doc


def test_observe_fallback_counts_by_model_and_fallback() -> None:
    m = Metrics()
    m.observe_fallback("sonnet", "gpt-5")
    m.observe_fallback("sonnet", "gpt-5")
    m.observe_fallback("sonnet", "qwen")
    assert value(m, "cursor_byok_llm_fallbacks_total", model="sonnet", fallback="gpt-5") == 2
    assert value(m, "cursor_byok_llm_fallbacks_total", model="sonnet", fallback="qwen") == 1


def test_observe_run() -> None:
    m = Metrics()
    s = RunSummary(
        request_id="r1",
        conversation_id="c1",
        model="gpt",
        provider="openai",
        outcome="ok",
        llm_calls=2,
        usage=Usage(input=5, output=6),
        duration_ms=3500,
    )
    m.observe_run(s)
    m.observe_run(RunSummary(request_id="r2", outcome="failed"))
    assert value(m, "cursor_byok_runs_total", provider="openai", model="gpt", outcome="ok") == 1
    assert (
        value(m, "cursor_byok_runs_total", provider="unknown", model="unknown", outcome="failed")
        == 1
    )
    assert value(m, "cursor_byok_run_duration_seconds_sum", provider="openai", model="gpt") == 3.5
    # Run summaries never add tokens (the calls did): no double counting.
    assert not any(k[0] == "cursor_byok_llm_tokens_total" for k in samples(m))


def test_every_documented_metric_is_exposed() -> None:
    m = Metrics()
    m.observe_rpc("/a.b.C/D", "ok")
    m.observe_llm_call(call_record("a"))
    m.observe_run(RunSummary(request_id="r", outcome="ok"))
    names = {k[0] for k in samples(m)}
    for family in (
        "cursor_byok_rpc_requests_total",
        "cursor_byok_active_runs",
        "cursor_byok_runs_total",
        "cursor_byok_run_duration_seconds_count",
        "cursor_byok_llm_calls_total",
        "cursor_byok_llm_ttft_seconds_bucket",
        "cursor_byok_llm_duration_seconds_bucket",
        "cursor_byok_llm_tokens_total",
        "cursor_byok_llm_cost_usd_total",
    ):
        assert family in names, family


def test_unknown_client_events_are_counted_by_kind_with_bounded_labels() -> None:
    m = Metrics()
    m.observe_unknown_event("conversation_action.summarize_action")
    m.observe_unknown_event("conversation_action.summarize_action")
    m.observe_unknown_event("prewarm_request")
    name = "cursor_byok_unknown_client_events_total"
    assert value(m, name, kind="conversation_action.summarize_action") == 2
    assert value(m, name, kind="prewarm_request") == 1
    for n in range(200):  # a client naming ever new kinds cannot grow the label set
        m.observe_unknown_event(f"kind-{n}")
    kinds = {labels for (metric, labels) in samples(m) if metric == name}
    assert len(kinds) <= 65 and value(m, name, kind="other") is not None


def test_server_caches_are_read_at_scrape_time() -> None:
    from cursor_byok.transport.runtime.summary import CacheStats

    m = Metrics()
    stats = [CacheStats("committed_states", 3, 4096, 5, 2)]
    m.bind_caches(lambda: stats)
    assert value(m, "cursor_byok_server_cache_entries", cache="committed_states") == 3
    assert value(m, "cursor_byok_server_cache_bytes", cache="committed_states") == 4096
    lookups = "cursor_byok_server_cache_lookups_total"
    assert value(m, lookups, cache="committed_states", result="hit") == 5
    assert value(m, lookups, cache="committed_states", result="miss") == 2
    stats[0] = CacheStats("committed_states", 4, 5000, 6, 2)  # read again at the next scrape
    assert value(m, lookups, cache="committed_states", result="hit") == 6


def test_no_created_series() -> None:
    m = Metrics()
    m.observe_rpc("/agent.v1.AgentService/Run", "ok")
    body, _ = m.render()
    text = body.decode()
    assert "cursor_byok_rpc_requests_total" in text
    assert "_created" not in text
