from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.lease import Lease
    from ..models.pool_health import PoolHealth
    from ..models.remediation_debt import RemediationDebt
    from ..models.supervisor_status_last_scan import SupervisorStatusLastScan


T = TypeVar("T", bound="SupervisorStatus")


@_attrs_define
class SupervisorStatus:
    """
    Attributes:
        lease (Lease):
        interval_seconds (float):
        last_scan_at (datetime.datetime | None):
        last_scan_age_seconds (float | None):
        stale (bool): No scan within three intervals.
        last_scan (SupervisorStatusLastScan): Figures of the last scan: examined, remediated, duration_ms, lag_ms,
            batches.
        remediation_debt (RemediationDebt):
        pools (list[PoolHealth]):
    """

    lease: Lease
    interval_seconds: float
    last_scan_at: datetime.datetime | None
    last_scan_age_seconds: float | None
    stale: bool
    last_scan: SupervisorStatusLastScan
    remediation_debt: RemediationDebt
    pools: list[PoolHealth]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        lease = self.lease.to_dict()

        interval_seconds = self.interval_seconds

        last_scan_at: None | str
        if isinstance(self.last_scan_at, datetime.datetime):
            last_scan_at = self.last_scan_at.isoformat()
        else:
            last_scan_at = self.last_scan_at

        last_scan_age_seconds: float | None
        last_scan_age_seconds = self.last_scan_age_seconds

        stale = self.stale

        last_scan = self.last_scan.to_dict()

        remediation_debt = self.remediation_debt.to_dict()

        pools = []
        for pools_item_data in self.pools:
            pools_item = pools_item_data.to_dict()
            pools.append(pools_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "lease": lease,
                "interval_seconds": interval_seconds,
                "last_scan_at": last_scan_at,
                "last_scan_age_seconds": last_scan_age_seconds,
                "stale": stale,
                "last_scan": last_scan,
                "remediation_debt": remediation_debt,
                "pools": pools,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.lease import Lease
        from ..models.pool_health import PoolHealth
        from ..models.remediation_debt import RemediationDebt
        from ..models.supervisor_status_last_scan import SupervisorStatusLastScan

        d = dict(src_dict)
        lease = Lease.from_dict(d.pop("lease"))

        interval_seconds = d.pop("interval_seconds")

        def _parse_last_scan_at(data: object) -> datetime.datetime | None:
            if data is None:
                return data
            try:
                if not isinstance(data, str):
                    raise TypeError()
                last_scan_at_type_0 = datetime.datetime.fromisoformat(data)

                return last_scan_at_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(datetime.datetime | None, data)

        last_scan_at = _parse_last_scan_at(d.pop("last_scan_at"))

        def _parse_last_scan_age_seconds(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        last_scan_age_seconds = _parse_last_scan_age_seconds(d.pop("last_scan_age_seconds"))

        stale = d.pop("stale")

        last_scan = SupervisorStatusLastScan.from_dict(d.pop("last_scan"))

        remediation_debt = RemediationDebt.from_dict(d.pop("remediation_debt"))

        pools = []
        _pools = d.pop("pools")
        for pools_item_data in _pools:
            pools_item = PoolHealth.from_dict(pools_item_data)

            pools.append(pools_item)

        supervisor_status = cls(
            lease=lease,
            interval_seconds=interval_seconds,
            last_scan_at=last_scan_at,
            last_scan_age_seconds=last_scan_age_seconds,
            stale=stale,
            last_scan=last_scan,
            remediation_debt=remediation_debt,
            pools=pools,
        )

        supervisor_status.additional_properties = d
        return supervisor_status

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
