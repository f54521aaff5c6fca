from enum import StrEnum


class StepStatusEnum(StrEnum):
    ATTEMPT_FAILED = "attempt_failed"
    COMPENSATED = "compensated"
    DISPATCHED = "dispatched"
    FAILED = "failed"
    HELD = "held"
    PENDING = "pending"
    RETRY_WAIT = "retry_wait"
    SKIPPED = "skipped"
    SUCCEEDED = "succeeded"
    UNKNOWN = "unknown"
    WAITING = "waiting"

    def __str__(self) -> str:
        return str(self.value)
