from enum import StrEnum


class AttemptCallbackOutcomeEnum(StrEnum):
    FAILED = "failed"
    REFUSED = "refused"
    SUCCEEDED = "succeeded"

    def __str__(self) -> str:
        return str(self.value)
