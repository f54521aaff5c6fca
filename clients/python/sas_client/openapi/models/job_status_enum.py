from enum import StrEnum


class JobStatusEnum(StrEnum):
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    COMPENSATING = "compensating"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"

    def __str__(self) -> str:
        return str(self.value)
