from enum import StrEnum


class JobsListStatus(StrEnum):
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    COMPENSATING = "compensating"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    VALUE_8 = ""

    def __str__(self) -> str:
        return str(self.value)
