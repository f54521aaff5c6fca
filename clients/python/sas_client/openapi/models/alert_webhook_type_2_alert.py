from enum import StrEnum


class AlertWebhookType2Alert(StrEnum):
    SUPERVISOR_STALE = "supervisor_stale"

    def __str__(self) -> str:
        return str(self.value)
