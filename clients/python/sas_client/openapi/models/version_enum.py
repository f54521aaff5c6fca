from enum import StrEnum


class VersionEnum(StrEnum):
    CURRENT = "current"
    JOB = "job"

    def __str__(self) -> str:
        return str(self.value)
