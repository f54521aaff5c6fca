from enum import StrEnum


class OutcomeEnum(StrEnum):
    BUSINESS_FAILURE = "business_failure"
    NOT_HAPPENED = "not_happened"
    NO_ANSWER = "no_answer"
    SUCCEEDED = "succeeded"
    SUPERSEDED = "superseded"
    TRANSIENT_FAILURE = "transient_failure"

    def __str__(self) -> str:
        return str(self.value)
