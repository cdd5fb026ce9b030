"""SONiC controller: interface shutdown / startup through SONiC's RESTCONF management API.

SONiC's management framework serves OpenConfig over RESTCONF (RFC 8040). The admin state of
an interface is ``openconfig-interfaces:interfaces/interface={name}/config/enabled``:

* read: ``GET /restconf/data/openconfig-interfaces:interfaces/interface=Ethernet8/config/enabled``
  -> ``{"openconfig-interfaces:enabled": true}``;
* shutdown / startup: ``PATCH`` the same path with ``{"openconfig-interfaces:enabled": false}``
  (or ``true``), answered ``204 No Content``.

A RoCE port is taken out with an admin shutdown (the Ethernet equivalent of UFM isolation).
The interface name comes from a template (``Ethernet{port}`` by default: SONiC numbers its
front-panel interfaces by first lane, so deployments give their own mapping).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from pydantic import SecretStr

from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.http import RestClient
from workflows.remediation.models import PortRef

_IFNAME = re.compile(r"^[A-Za-z][A-Za-z0-9/._-]{0,63}$")
_PATH = "/restconf/data/openconfig-interfaces:interfaces/interface={name}/config/enabled"
_LEAF = "openconfig-interfaces:enabled"


class SonicController:
    name = "sonic"

    def __init__(self, base_url: str, username: str, password: SecretStr, *,
                 interface_template: str = "Ethernet{port}", verify_tls: bool = True,
                 timeout_s: float = 30.0) -> None:
        self._rest = RestClient(
            base_url, basic_auth=(username, password.get_secret_value()),
            timeout_s=timeout_s, verify_tls=verify_tls,
            headers={"Content-Type": "application/yang-data+json",
                     "Accept": "application/yang-data+json"})
        self._template = interface_template

    async def aclose(self) -> None:
        await self._rest.close()

    def interface(self, port: PortRef) -> str:
        name = self._template.format(port=port.port, device=port.device)
        if not _IFNAME.match(name):
            raise AdapterRejected(f"{port.key}: {name!r} is not a SONiC interface name")
        return name

    def _path(self, port: PortRef) -> str:
        return _PATH.format(name=quote(self.interface(port), safe=""))

    async def enabled(self, port: PortRef) -> bool:
        data: Any = await self._rest.request("GET", self._path(port))
        if not isinstance(data, dict) or _LEAF not in data:
            raise AdapterError(f"{port.key}: unexpected RESTCONF answer {str(data)[:200]}")
        return bool(data[_LEAF])

    async def _set(self, port: PortRef, enabled: bool) -> bool:
        if await self.enabled(port) == enabled:
            return False
        await self._rest.request("PATCH", self._path(port), json_body={_LEAF: enabled})
        return True

    async def isolate(self, port: PortRef) -> bool:
        return await self._set(port, False)

    async def unisolate(self, port: PortRef) -> bool:
        return await self._set(port, True)

    async def is_isolated(self, port: PortRef) -> bool:
        return not await self.enabled(port)

    async def reset_counters(self, port: PortRef) -> None:
        return None  # the clean-counter check reads deltas since a time; nothing to clear

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        return None
