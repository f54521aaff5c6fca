"""The python agent: call a dotted-path callable in the worker with the step's payload. Only the
callables SAS_PYTHON_AGENTS registers (checked when the workflow is saved and again here).

The callable returns the step's output (JSON-serialisable), raises BusinessFailure to say no, or
raises anything else for a transient failure. A status callable (to reconcile) returns the output
of an operation that happened or raises NotHappened. A callable cannot be interrupted: one that
returns after the deadline is recorded as a late outcome.
"""

from __future__ import annotations

import json
import time

from django.utils.module_loading import import_string

from agents.outcome import BusinessFailure, CallResult, CallSpec, NotHappened, Outcome
from agents.validation import python_agent_allowed
from sas_project.conf import sas_settings


def call_python(spec: CallSpec) -> CallResult:
    started = time.monotonic()

    def elapsed_ms() -> int:
        return int((time.monotonic() - started) * 1000)

    if not python_agent_allowed(spec.path):
        # Saved before the setting changed, or written around the definitions' check.
        return CallResult(
            Outcome.BUSINESS_FAILURE,
            error=f"{spec.path!r} is not a registered python agent (SAS_PYTHON_AGENTS)",
        )
    try:
        func = import_string(spec.path)
    except ImportError as exc:
        return CallResult(Outcome.BUSINESS_FAILURE, error=f"cannot import {spec.path!r}: {exc}")
    try:
        output = func(spec.payload)
        excerpt = json.dumps(output, default=str)[: sas_settings.response_excerpt_bytes]
    except BusinessFailure as exc:
        return CallResult(Outcome.BUSINESS_FAILURE, latency_ms=elapsed_ms(), error=str(exc)[:1000])
    except NotHappened as exc:
        return CallResult(Outcome.NOT_HAPPENED, latency_ms=elapsed_ms(), error=str(exc)[:1000])
    except Exception as exc:  # noqa: BLE001 - any other error of user code is a transient failure
        return CallResult(Outcome.TRANSIENT_FAILURE, latency_ms=elapsed_ms(), error=repr(exc)[:1000])
    return CallResult(Outcome.SUCCEEDED, output=output, latency_ms=elapsed_ms(), excerpt=excerpt)
