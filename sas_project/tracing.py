"""OpenTelemetry tracing: off unless the standard OTEL_* variables configure it.

One trace per job. Submitting a job opens its trace (span `submit`) and stores the W3C
`traceparent` on the job; every later span of the job, in whichever process, joins that trace:
`dispatch` (the attempt's time in the queue, from its dispatch to its claim), `call` (the agent's
call, an HTTP client span whose `traceparent` header lets the remote's own spans join the job's
trace) and `outcome` (recording it). With tracing off nothing here imports OpenTelemetry's SDK,
no span is made and no header is sent.

Turned on by OTEL_TRACES_EXPORTER (`otlp`, `console`) or an OTLP endpoint
(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SERVICE_NAME names the
service (default `scheduler-agent-supervisor`); OTEL_SDK_DISABLED=true turns it off.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_provider: Any = None


def enabled() -> bool:
    if _provider is not None:
        return True
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "")
    if exporter == "none":
        return False
    return bool(
        exporter
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def install(provider: Any) -> None:
    """Use this tracer provider (the tests' in-memory one, or the one configured below)."""
    global _provider
    _provider = provider


def _tracer() -> Any:
    global _provider
    if _provider is None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        provider = TracerProvider(
            resource=Resource.create(
                {"service.name": os.environ.get("OTEL_SERVICE_NAME", "scheduler-agent-supervisor")}
            )
        )
        if os.environ.get("OTEL_TRACES_EXPORTER", "otlp") == "console":
            exporter: Any = ConsoleSpanExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        _provider = provider
    return _provider.get_tracer("sas")


def _context(trace_parent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": trace_parent})


def _traceparent() -> str:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


def _ns(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


@contextmanager
def job_trace(workflow: str) -> Iterator[str]:
    """Open a job's trace around its submission (span `submit`); yields the `traceparent` its
    later spans join, or "" when tracing is off."""
    if not enabled():
        yield ""
        return
    with _tracer().start_as_current_span("submit", attributes={"sas.workflow": workflow}):
        yield _traceparent()


def dispatch_span(trace_parent: str, *, started: dt.datetime, ended: dt.datetime, **attributes: Any) -> None:
    """The attempt's time between its dispatch and its claim, as a span of the job's trace."""
    if not trace_parent or not enabled():
        return
    span = _tracer().start_span(
        "dispatch", context=_context(trace_parent), start_time=_ns(started), attributes=attributes
    )
    span.end(end_time=_ns(max(ended, started)))


@contextmanager
def call_span(trace_parent: str, **attributes: Any) -> Iterator[dict[str, str]]:
    """An agent's call as a client span of the job's trace; yields the headers that carry the
    trace to the remote (`traceparent`), empty when tracing is off."""
    if not trace_parent or not enabled():
        yield {}
        return
    from opentelemetry.trace import SpanKind

    with _tracer().start_as_current_span(
        "call", context=_context(trace_parent), kind=SpanKind.CLIENT, attributes=attributes
    ):
        yield {"traceparent": _traceparent()}


@contextmanager
def span(name: str, trace_parent: str, **attributes: Any) -> Iterator[None]:
    """Any other span of a job's trace (`outcome`)."""
    if not trace_parent or not enabled():
        yield
        return
    with _tracer().start_as_current_span(name, context=_context(trace_parent), attributes=attributes):
        yield
