from enum import StrEnum


class AttemptKindEnum(StrEnum):
    CALL = "call"
    RECONCILE = "reconcile"

    def __str__(self) -> str:
        return str(self.value)
