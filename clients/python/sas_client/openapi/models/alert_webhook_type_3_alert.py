from enum import StrEnum


class AlertWebhookType3Alert(StrEnum):
    QUARANTINED = "quarantined"

    def __str__(self) -> str:
        return str(self.value)
