"""SONiC controller: interface shutdown / startup through each switch's RESTCONF API.

SONiC's management framework serves OpenConfig over RESTCONF (RFC 8040) on every switch. The
admin state of an interface is ``openconfig-interfaces:interfaces/interface={name}/config/enabled``:

* read: ``GET /restconf/data/openconfig-interfaces:interfaces/interface=Ethernet8/config/enabled``
  -> ``{"openconfig-interfaces:enabled": true}``;
* shutdown / startup: ``PATCH`` the same path with ``{"openconfig-interfaces:enabled": false}``
  (or ``true``), answered ``204 No Content``.

A RoCE port is taken out with an admin shutdown (the Ethernet equivalent of UFM isolation).
Which switch answers for ``leaf-su02-r3:8``, and what its port 8 is called there, comes from
the device inventory (``device_inventory``): SONiC names front-panel interfaces by first
lane (``Ethernet32`` for port 8 on a 4-lane platform), so a name is never guessed from the
port number. A device or port the inventory does not name is refused before any request.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from workflows.adapters.base import AdapterError
from workflows.adapters.device_inventory import DeviceInventory
from workflows.adapters.http import RestClient
from workflows.remediation.models import PortRef

_PATH = "/restconf/data/openconfig-interfaces:interfaces/interface={name}/config/enabled"
_LEAF = "openconfig-interfaces:enabled"


class SonicController:
    name = "sonic"

    def __init__(self, inventory: DeviceInventory, *,
                 default_login: tuple[str, SecretStr] | None = None,
                 timeout_s: float = 30.0) -> None:
        """Logins are resolved now (secret files read once, a missing one fails at start)."""
        self._inventory = inventory
        self._clients: dict[str, RestClient] = {}
        for device, entry in inventory.devices.items():
            if entry.sonic is None:
                continue
            user, password = inventory.login(entry.sonic.credentials, default_login,
                                             f"SONiC {device}")
            self._clients[device] = RestClient(
                entry.sonic.url, basic_auth=(user, password.get_secret_value()),
                timeout_s=timeout_s, verify_tls=entry.sonic.verify_tls,
                headers={"Content-Type": "application/yang-data+json",
                         "Accept": "application/yang-data+json"})

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()

    def interface(self, port: PortRef) -> str:
        """The inventory's interface name of the port (AdapterRejected when it has none)."""
        return self._inventory.sonic(port.device, port.port)[1]

    def _target(self, port: PortRef) -> tuple[RestClient, str]:
        name = self.interface(port)
        return self._clients[port.device], _PATH.format(name=quote(name, safe=""))

    async def enabled(self, port: PortRef) -> bool:
        client, path = self._target(port)
        data: Any = await client.request("GET", path)
        if not isinstance(data, dict) or not isinstance(data.get(_LEAF), bool):
            raise AdapterError(f"{port.key}: unexpected RESTCONF answer {str(data)[:200]}")
        return bool(data[_LEAF])

    async def _set(self, port: PortRef, enabled: bool) -> bool:
        if await self.enabled(port) == enabled:
            return False
        client, path = self._target(port)
        await client.request("PATCH", path, json_body={_LEAF: enabled})
        return True

    async def isolate(self, port: PortRef) -> bool:
        return await self._set(port, False)

    async def unisolate(self, port: PortRef) -> bool:
        return await self._set(port, True)

    async def is_isolated(self, port: PortRef) -> bool:
        return not await self.enabled(port)

    async def reset_counters(self, port: PortRef) -> None:
        self.interface(port)  # a port it does not have is refused here too
        return None  # the clean-counter check reads deltas since a time; nothing to clear

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        self.interface(port)
        return None
