from enum import StrEnum


class RetryOnEnum(StrEnum):
    BUSINESS_FAILURE = "business_failure"
    NO_ANSWER = "no_answer"
    TRANSIENT_FAILURE = "transient_failure"

    def __str__(self) -> str:
        return str(self.value)
