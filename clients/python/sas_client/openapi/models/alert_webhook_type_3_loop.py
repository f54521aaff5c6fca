from enum import StrEnum


class AlertWebhookType3Loop(StrEnum):
    CHILDREN = "children"
    JOB_DEADLINES = "job_deadlines"
    REMEDIATION = "remediation"
    RETENTION = "retention"
    SCHEDULES = "schedules"
    WAITS = "waits"

    def __str__(self) -> str:
        return str(self.value)
