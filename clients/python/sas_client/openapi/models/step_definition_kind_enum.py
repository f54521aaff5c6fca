from enum import StrEnum


class StepDefinitionKindEnum(StrEnum):
    APPROVAL = "approval"
    CALL = "call"
    SIGNAL = "signal"
    TIMER = "timer"
    WORKFLOW = "workflow"

    def __str__(self) -> str:
        return str(self.value)
