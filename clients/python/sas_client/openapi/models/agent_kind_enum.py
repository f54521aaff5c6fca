from enum import StrEnum


class AgentKindEnum(StrEnum):
    HTTP = "http"
    PYTHON = "python"
    QUEUE = "queue"

    def __str__(self) -> str:
        return str(self.value)
