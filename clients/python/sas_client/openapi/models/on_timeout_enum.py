from enum import StrEnum


class OnTimeoutEnum(StrEnum):
    CONTINUE = "continue"
    FAIL = "fail"
    HOLD = "hold"

    def __str__(self) -> str:
        return str(self.value)
