from enum import StrEnum


class RecordedEnum(StrEnum):
    LATE = "late"
    RECORDED = "recorded"

    def __str__(self) -> str:
        return str(self.value)
