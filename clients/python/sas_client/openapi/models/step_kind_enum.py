from enum import StrEnum


class StepKindEnum(StrEnum):
    ACTION = "action"
    COMPENSATION = "compensation"
    ITEM = "item"

    def __str__(self) -> str:
        return str(self.value)
