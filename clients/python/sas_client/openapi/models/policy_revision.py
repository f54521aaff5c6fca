from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.policy_revision_changes import PolicyRevisionChanges
    from ..models.policy_revision_settings import PolicyRevisionSettings


T = TypeVar("T", bound="PolicyRevision")


@_attrs_define
class PolicyRevision:
    """
    Attributes:
        version (int):
        settings (PolicyRevisionSettings): Every setting of the policy at this version.
        changes (PolicyRevisionChanges): {field: [old, new]} against the previous version.
        changed_by (None | str):
        changed_at (datetime.datetime):
    """

    version: int
    settings: PolicyRevisionSettings
    changes: PolicyRevisionChanges
    changed_by: None | str
    changed_at: datetime.datetime
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        version = self.version

        settings = self.settings.to_dict()

        changes = self.changes.to_dict()

        changed_by: None | str
        changed_by = self.changed_by

        changed_at = self.changed_at.isoformat()

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "version": version,
                "settings": settings,
                "changes": changes,
                "changed_by": changed_by,
                "changed_at": changed_at,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.policy_revision_changes import PolicyRevisionChanges
        from ..models.policy_revision_settings import PolicyRevisionSettings

        d = dict(src_dict)
        version = d.pop("version")

        settings = PolicyRevisionSettings.from_dict(d.pop("settings"))

        changes = PolicyRevisionChanges.from_dict(d.pop("changes"))

        def _parse_changed_by(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        changed_by = _parse_changed_by(d.pop("changed_by"))

        changed_at = datetime.datetime.fromisoformat(d.pop("changed_at"))

        policy_revision = cls(
            version=version,
            settings=settings,
            changes=changes,
            changed_by=changed_by,
            changed_at=changed_at,
        )

        policy_revision.additional_properties = d
        return policy_revision

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
