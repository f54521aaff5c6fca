from enum import StrEnum


class AlertWebhookType5Alert(StrEnum):
    ARCHIVE_FAILED = "archive_failed"

    def __str__(self) -> str:
        return str(self.value)
