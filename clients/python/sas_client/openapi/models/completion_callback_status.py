from enum import StrEnum


class CompletionCallbackStatus(StrEnum):
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    FAILED = "failed"
    SUCCEEDED = "succeeded"

    def __str__(self) -> str:
        return str(self.value)
