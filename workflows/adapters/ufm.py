"""NVIDIA UFM Enterprise REST controller: isolation through UFM's unhealthy-ports API.

As NVIDIA documents it (UFM Enterprise REST API Guide, "Unhealthy Ports REST API"):

* list: ``GET /ufmRest/app/unhealthy_ports`` -> ``[{"UnhealthyGUID": "248a0703002e628e",
  "UnhealthyPortNumber": 1, ...}]``;
* isolate: ``PUT /ufmRestV2/app/unhealthy_ports`` with ``{"ports": ["<guid>_<port>"],
  "ports_policy": "UNHEALTHY", "action": "isolate"}``;
* de-isolate: the same with ``"ports_policy": "HEALTHY"``.

UFM identifies a port by its node GUID (16 hex digits, no ``0x``) and port number; the
GUID, the ports and which UFM manages the device come from the device inventory
(``device_inventory``): a device or port it does not list is refused before any request, and
a port whose topology GUID disagrees with the inventory's is refused too (one of the two is
wrong, and isolating the wrong port is worse than a human looking). Every change first lists
the unhealthy ports, so a retried isolate that already took effect does nothing and says so.
Basic auth per UFM from the inventory's credential files (or the settings' secrets); the
password is never logged.

The UFM SDK's port-health plugin (``pdr_deterministic``) isolates and de-isolates with exactly
these two bodies; isolation, not a port disable action, is what UFM lists back as unhealthy,
so the state read before every change is UFM's own.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import SecretStr

from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.device_inventory import DeviceInventory
from workflows.adapters.http import RestClient
from workflows.remediation.models import PortRef

_GUID = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})$")
LIST_PATH = "/ufmRest/app/unhealthy_ports"
CHANGE_PATH = "/ufmRestV2/app/unhealthy_ports"


def ufm_port_name(port: PortRef) -> str:
    """``<guid>_<port>`` as UFM names ports; refuses a port without a valid GUID."""
    if port.guid is None:
        raise AdapterRejected(f"{port.key}: UFM needs the node GUID of the port (none known)")
    m = _GUID.match(port.guid.strip())
    if m is None:
        raise AdapterRejected(f"{port.key}: {port.guid!r} is not a node GUID")
    if not 1 <= port.port <= 255:
        raise AdapterRejected(f"{port.key}: port {port.port} is not an InfiniBand port number")
    return f"{m.group(1).lower().zfill(16)}_{port.port}"


class UfmController:
    name = "ufm"

    def __init__(self, inventory: DeviceInventory, *,
                 default_login: tuple[str, SecretStr] | None = None,
                 timeout_s: float = 30.0) -> None:
        self._inventory = inventory
        self._clients: dict[str, RestClient] = {}
        for name, ufm in inventory.ufm.items():
            user, password = inventory.login(ufm.credentials, default_login, f"UFM {name}")
            self._clients[name] = RestClient(
                ufm.url, basic_auth=(user, password.get_secret_value()),
                timeout_s=timeout_s, verify_tls=ufm.verify_tls,
                headers={"Content-Type": "application/json"})

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()

    def target(self, port: PortRef) -> tuple[RestClient, str]:
        """The UFM that manages the port and UFM's name for it, from the inventory."""
        instance, device = self._inventory.ufm_port(port.device, port.port)
        if port.guid is not None:
            seen = _GUID.match(port.guid.strip())
            if seen is None or seen.group(1).lower().zfill(16) != device.guid:
                raise AdapterRejected(f"{port.key}: the topology's GUID {port.guid!r} is not "
                                      f"the inventory's 0x{device.guid}")
        name = ufm_port_name(port.model_copy(update={"guid": device.guid}))
        return self._clients[instance], name

    @staticmethod
    async def unhealthy(client: RestClient) -> set[str]:
        data: Any = await client.request("GET", LIST_PATH)
        if not isinstance(data, list):
            raise AdapterError(f"GET {LIST_PATH}: expected a list, got {type(data).__name__}")
        names: set[str] = set()
        for entry in data:
            if isinstance(entry, dict) and "UnhealthyGUID" in entry:
                guid = str(entry["UnhealthyGUID"]).lower().removeprefix("0x").zfill(16)
                names.add(f"{guid}_{int(entry.get('UnhealthyPortNumber', 0))}")
        return names

    async def is_isolated(self, port: PortRef) -> bool:
        client, name = self.target(port)
        return name in await self.unhealthy(client)

    async def isolate(self, port: PortRef) -> bool:
        client, name = self.target(port)
        if name in await self.unhealthy(client):
            return False
        await client.request("PUT", CHANGE_PATH, json_body={
            "ports": [name], "ports_policy": "UNHEALTHY", "action": "isolate"})
        return True

    async def unisolate(self, port: PortRef) -> bool:
        client, name = self.target(port)
        if name not in await self.unhealthy(client):
            return False
        await client.request("PUT", CHANGE_PATH, json_body={
            "ports": [name], "ports_policy": "HEALTHY"})
        return True

    async def reset_counters(self, port: PortRef) -> None:
        # UFM keeps counter deltas itself; the clean-counter check reads deltas since a time.
        self.target(port)
        return None

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        self.target(port)
        return None  # a physical repair: the technician's word is the record
