from enum import StrEnum


class CatchUpEnum(StrEnum):
    ONCE = "once"
    SKIP = "skip"

    def __str__(self) -> str:
        return str(self.value)
