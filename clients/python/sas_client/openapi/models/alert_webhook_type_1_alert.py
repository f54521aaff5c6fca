from enum import StrEnum


class AlertWebhookType1Alert(StrEnum):
    CIRCUIT_OPENED = "circuit_opened"

    def __str__(self) -> str:
        return str(self.value)
