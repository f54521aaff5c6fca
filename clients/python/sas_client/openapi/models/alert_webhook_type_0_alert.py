from enum import StrEnum


class AlertWebhookType0Alert(StrEnum):
    APPROVAL_REQUESTED = "approval_requested"
    JOB_COMPENSATED = "job_compensated"
    JOB_FAILED = "job_failed"
    STEP_NEEDS_ATTENTION = "step_needs_attention"

    def __str__(self) -> str:
        return str(self.value)
