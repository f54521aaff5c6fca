from enum import StrEnum


class KindsEnum(StrEnum):
    APPROVAL_REQUESTED = "approval_requested"
    ARCHIVE_FAILED = "archive_failed"
    CANARY_UNREMEDIATED = "canary_unremediated"
    CIRCUIT_OPENED = "circuit_opened"
    JOB_COMPENSATED = "job_compensated"
    JOB_FAILED = "job_failed"
    QUARANTINED = "quarantined"
    STEP_NEEDS_ATTENTION = "step_needs_attention"
    SUPERVISOR_NOT_REMEDIATING = "supervisor_not_remediating"
    SUPERVISOR_STALE = "supervisor_stale"

    def __str__(self) -> str:
        return str(self.value)
