"""In-process actions for python pools: a no-op (benchmarks, smoke tests) and an echo."""

from __future__ import annotations

from typing import Any


def noop(payload: dict[str, Any]) -> dict[str, Any]:
    """Does nothing and says so."""
    return {}


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Returns the job's input, for checking what an agent receives."""
    return {"input": payload.get("input"), "step": payload.get("step")}
