from enum import StrEnum


class AlertWebhookType4Alert(StrEnum):
    SUPERVISOR_NOT_REMEDIATING = "supervisor_not_remediating"

    def __str__(self) -> str:
        return str(self.value)
