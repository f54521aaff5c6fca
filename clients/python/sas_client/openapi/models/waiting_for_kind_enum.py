from enum import StrEnum


class WaitingForKindEnum(StrEnum):
    APPROVAL = "approval"
    CAPACITY = "capacity"
    ITEMS = "items"
    SIGNAL = "signal"
    TIMER = "timer"
    WORKFLOW = "workflow"

    def __str__(self) -> str:
        return str(self.value)
