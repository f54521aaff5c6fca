from enum import StrEnum


class AlertWebhookType6Alert(StrEnum):
    CANARY_UNREMEDIATED = "canary_unremediated"

    def __str__(self) -> str:
        return str(self.value)
