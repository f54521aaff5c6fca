"""A fake remote for unit tests: the one boundary tests may replace.

Install it in place of the real call (`agents.calls.run_call`); it answers from a script per
step name and records every call it receives, so tests can count remote calls.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from agents.outcome import CallResult, CallSpec, Outcome


@dataclass
class FakeRemote:
    """Answers `succeeded` with {"ok": step} unless a script for the step says otherwise."""

    scripts: dict[str, deque[CallResult]] = field(default_factory=lambda: defaultdict(deque))
    calls: list[CallSpec] = field(default_factory=list)
    #: Operation IDs whose effect happened (a success, or a no-answer that "committed").
    effects: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def script(self, step: str, *outcomes: str | CallResult) -> None:
        for item in outcomes:
            result = item if isinstance(item, CallResult) else CallResult(item, error=f"scripted {item}")
            self.scripts[step].append(result)

    def __call__(self, spec: CallSpec) -> CallResult:
        self.calls.append(spec)
        step = spec.payload["step"]
        if spec.is_cancel:
            # A cancel has its own script (`<step>.cancel`) and makes no effect of its operation.
            queue = self.scripts.get(f"{step}.cancel")
            return queue.popleft() if queue else CallResult(Outcome.SUCCEEDED, output={"cancelled": step})
        queue = self.scripts.get(step if not spec.payload.get("compensates") else f"{step}.compensate")
        result = queue.popleft() if queue else CallResult(Outcome.SUCCEEDED, output={"ok": step})
        if result.outcome == Outcome.SUCCEEDED and not spec.is_reconcile:
            self.effects[spec.operation_id] += 0 if self.effects.get(spec.operation_id) else 1
        return result

    def calls_for(self, step: str, *, kind: str | None = None) -> list[CallSpec]:
        return [
            c
            for c in self.calls
            if c.payload["step"] == step
            and not c.payload.get("compensates")
            and not c.is_cancel
            and (kind is None or c.kind == kind)
        ]

    def cancels(self) -> list[CallSpec]:
        """The cancels sent, in order."""
        return [c for c in self.calls if c.is_cancel]

    def compensations(self) -> list[str]:
        """Names of the steps whose compensation was called, in call order."""
        return [c.payload["step"] for c in self.calls if c.payload.get("compensates")]

    def operation_ids(self) -> dict[str, Any]:
        return {c.payload["step"]: c.operation_id for c in self.calls}
