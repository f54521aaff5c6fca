"""The archive store's configuration when it is S3-compatible object storage (SAS_ARCHIVE_STORAGE=s3).

Kept apart from the settings so that tests and tools build the same entry of Django's STORAGES
for another bucket or endpoint. django-storages' S3Storage does the work (boto3 underneath)."""

from __future__ import annotations

from typing import Any


def s3_archive_storage(
    *,
    bucket: str,
    prefix: str = "",
    endpoint_url: str | None = None,
    region: str | None = None,
    timeout: float = 3,
) -> dict[str, Any]:
    """STORAGES["archive"] for a bucket. Credentials come from boto3's own chain
    (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a web identity token, an instance role)."""
    from botocore.config import Config

    return {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": bucket,
            "location": prefix.strip("/"),
            "endpoint_url": endpoint_url or None,
            "region_name": region or None,
            # Names are unique per write (scheduler.archive.object_name): no existence check
            # before each, and no ACL sent (the bucket's policy applies; many refuse ACLs).
            "file_overwrite": True,
            "default_acl": None,
            "querystring_auth": False,
            # The lease holder's loop writes the archive between its scans: each try connects
            # and answers within `timeout`, two tries (about 4 x `timeout` at worst), rather
            # than botocore's minutes.
            "client_config": Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"max_attempts": 2, "mode": "standard"},
                # Plain signed requests: no streaming checksums, which some S3-compatible
                # stores refuse.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        },
    }
