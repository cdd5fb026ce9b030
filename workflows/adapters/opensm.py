"""InfiniBand controller without UFM: ``ibportstate`` (infiniband-diags) on a host with a
path to the subnet, the way opensm-managed fabrics take a port out by hand.

* query: ``ibportstate <lid> <port>`` prints the PortInfo; ``PhysLinkState:....Disabled``
  means isolated;
* isolate: ``ibportstate <lid> <port> disable``; return: ``... enable``;
* reset counters: ``perfquery -R <lid> <port>``.

The address is the port's LID by default (the SM must have assigned LIDs); ``address`` can
give another form, e.g. a direct route (``["-D", "0,1"]``) where no SM runs. ``wrapper`` is
an argument prefix such as ``["ibsim-run"]`` for the ibsim lab. Everything is an argument
list after validation; a state change is made only when the query says it is needed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from workflows.adapters.base import AdapterError
from workflows.adapters.tools import check_lid, check_port, run_tool
from workflows.remediation.models import PortRef

_PHYS = re.compile(r"^PhysLinkState:\.*(\S.*)$", re.MULTILINE)


def lid_address(port: PortRef) -> list[str]:
    return [str(check_lid(port.lid))]


class IbPortStateController:
    name = "opensm"

    def __init__(self, *, wrapper: Sequence[str] = (), timeout_s: float = 30.0,
                 address: Callable[[PortRef], list[str]] = lid_address,
                 ibportstate: str = "ibportstate", perfquery: str = "perfquery") -> None:
        self._wrapper = list(wrapper)
        self._timeout = timeout_s
        self._address = address
        self._ibportstate = ibportstate
        self._perfquery = perfquery

    async def _run(self, tool: str, argv: list[str]) -> str:
        out = await run_tool(tool, [*self._wrapper, *argv], self._timeout)
        if out.exit_code != 0:
            raise AdapterError(f"{tool} {' '.join(argv)}: exit {out.exit_code}: "
                               f"{out.output.strip()[-300:]}")
        return out.output

    async def phys_state(self, port: PortRef) -> str:
        text = await self._run("ibportstate", [self._ibportstate, *self._address(port),
                                               str(check_port(port.port))])
        m = _PHYS.search(text)
        if m is None:
            raise AdapterError(f"{port.key}: no PhysLinkState in ibportstate output")
        return m.group(1).strip()

    async def is_isolated(self, port: PortRef) -> bool:
        return await self.phys_state(port) == "Disabled"

    async def _set(self, port: PortRef, op: str) -> None:
        await self._run("ibportstate", [self._ibportstate, *self._address(port),
                                        str(check_port(port.port)), op])

    async def isolate(self, port: PortRef) -> bool:
        if await self.is_isolated(port):
            return False
        await self._set(port, "disable")
        return True

    async def unisolate(self, port: PortRef) -> bool:
        if not await self.is_isolated(port):
            return False
        await self._set(port, "enable")
        return True

    async def reset_counters(self, port: PortRef) -> None:
        await self._run("perfquery", [self._perfquery, "-R", *self._address(port),
                                      str(check_port(port.port))])

    async def repair_step(self, port: PortRef, rung: str) -> bool | None:
        return None  # a physical repair: the technician's word is the record
