from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from attrs import define as _attrs_define
from attrs import field as _attrs_field

if TYPE_CHECKING:
    from ..models.bulk_item import BulkItem


T = TypeVar("T", bound="BulkResult")


@_attrs_define
class BulkResult:
    """
    Attributes:
        action (str):
        dry_run (bool):
        done (int):
        refused (int):
        items (list[BulkItem]):
    """

    action: str
    dry_run: bool
    done: int
    refused: int
    items: list[BulkItem]
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        action = self.action

        dry_run = self.dry_run

        done = self.done

        refused = self.refused

        items = []
        for items_item_data in self.items:
            items_item = items_item_data.to_dict()
            items.append(items_item)

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update(
            {
                "action": action,
                "dry_run": dry_run,
                "done": done,
                "refused": refused,
                "items": items,
            }
        )

        return field_dict

    @classmethod
    def from_dict(cls, src_dict: Mapping[str, Any]) -> Self:
        from ..models.bulk_item import BulkItem

        d = dict(src_dict)
        action = d.pop("action")

        dry_run = d.pop("dry_run")

        done = d.pop("done")

        refused = d.pop("refused")

        items = []
        _items = d.pop("items")
        for items_item_data in _items:
            items_item = BulkItem.from_dict(items_item_data)

            items.append(items_item)

        bulk_result = cls(
            action=action,
            dry_run=dry_run,
            done=done,
            refused=refused,
            items=items,
        )

        bulk_result.additional_properties = d
        return bulk_result

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
