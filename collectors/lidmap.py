"""Resolve LIDs and GUIDs to contract device names through a discovered topology.

Tools such as perfquery and the opensm log name a port by LID (or GUID) only; the contract
names it by device. A ``LidMap`` is built from ``parse_nodes`` output or from a published
``topology`` event's ``nodes`` list (the latest topology wins: build a new map per event).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collectors.common import guid_str
from collectors.ibnetdiscover import Node
from schemas import Topology


@dataclass(frozen=True, slots=True)
class LidTarget:
    """What a LID addresses: a device, and the port for a CA (None for a switch's port 0)."""

    device: str
    port: int | None
    type: str


class LidMap:
    """LID -> device (and port), GUID -> device, with LMC ranges honoured."""

    def __init__(self) -> None:
        self._lids: dict[int, LidTarget] = {}
        self._guids: dict[str, str] = {}

    def add(self, *, name: str, type: str, guid: str, lids: Mapping[int, int],
            lmc: int = 0, port_guids: Mapping[int, str] | None = None) -> None:
        self._guids[guid_str(guid)] = name
        for port_guid in (port_guids or {}).values():
            # A CA port GUID (tools such as ibqueryerrors print it) names the same device.
            self._guids.setdefault(guid_str(port_guid), name)
        for port, lid in lids.items():
            target = LidTarget(name, None if type == "switch" else port, type)
            for offset in range(1 << max(0, min(lmc, 7))):
                self._lids[lid + offset] = target

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node]) -> LidMap:
        lidmap = cls()
        for node in nodes:
            lidmap.add(name=node.name, type=node.type, guid=node.guid, lids=node.lids,
                       lmc=node.lmc, port_guids=node.port_guids)
        return lidmap

    @classmethod
    def from_topology(cls, topology: Topology) -> LidMap:
        """From a topology event's extra ``nodes`` list (empty map when it has none)."""
        lidmap = cls()
        extra: dict[str, Any] = topology.model_extra or {}
        for node in extra.get("nodes") or []:
            try:
                lids = {int(port): int(lid) for port, lid in dict(node["lids"]).items()}
                port_guids = {int(p): str(g) for p, g in
                              dict(node.get("port_guids") or {}).items()}
                lidmap.add(name=str(node["name"]), type=str(node["type"]),
                           guid=str(node["guid"]), lids=lids, lmc=int(node.get("lmc", 0)),
                           port_guids=port_guids)
            except (KeyError, TypeError, ValueError):
                continue  # a node entry from a newer or broken producer: skip, keep the rest
        return lidmap

    def by_lid(self, lid: int) -> LidTarget | None:
        return self._lids.get(lid)

    def device_for_lid(self, lid: int) -> str | None:
        target = self._lids.get(lid)
        return target.device if target else None

    def device_for_guid(self, guid: str | int) -> str | None:
        try:
            return self._guids.get(guid_str(guid))
        except ValueError:
            return None

    def __len__(self) -> int:
        return len(self._lids)
