from enum import StrEnum


class OnExhaustedEnum(StrEnum):
    COMPENSATE = "compensate"
    FAIL = "fail"
    HOLD = "hold"

    def __str__(self) -> str:
        return str(self.value)
