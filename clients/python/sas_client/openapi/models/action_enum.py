from enum import StrEnum


class ActionEnum(StrEnum):
    CANCEL = "cancel"
    COMPENSATE = "compensate"
    RETRY = "retry"

    def __str__(self) -> str:
        return str(self.value)
