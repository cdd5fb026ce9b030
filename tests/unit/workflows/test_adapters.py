"""Adapters against loopback HTTP servers that follow each product's documented API:
UFM's unhealthy-ports REST API, SONiC's RESTCONF interface admin state and the ticket
webhook (the Kubernetes fencer: test_k8s_fencer.py). The servers check what they are
sent (paths, bodies, auth) the way the product would, so a wrong request fails the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from fakes.rest_apis import FakeSonic, FakeUfm, serve
from pydantic import SecretStr

from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.device_inventory import DeviceInventory, load_device_inventory
from workflows.adapters.sonic import SonicController
from workflows.adapters.ticket import WebhookTicketing
from workflows.adapters.ufm import UfmController, ufm_port_name
from workflows.remediation.models import PortRef

GUID = "0x248a0703002e628e"
PORT = PortRef(fabric="lab", device="leaf-su01-r1", port=17, guid=GUID, su="su01", rail=1)


def write_inventory(tmp: Path, body: dict[str, Any]) -> DeviceInventory:
    (tmp / "ufm-password").write_text("s3cret\n")
    (tmp / "sonic-password").write_text("YourPaSsWoRd\n")
    body = {"credentials": {
        "ufm-api": {"username": "admin", "password_file": str(tmp / "ufm-password")},
        "sonic-admin": {"username": "admin", "password_file": str(tmp / "sonic-password")}},
        **body}
    path = tmp / "inventory.json"
    path.write_bytes(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS))
    return load_device_inventory(path)


# --- UFM ------------------------------------------------------------------------------------

@pytest.fixture
async def ufm(tmp_path: Path) -> AsyncIterator[tuple[FakeUfm, UfmController]]:
    fake = FakeUfm({f"248a0703002e628e_{p}" for p in range(1, 41)})
    runner, url = await serve(fake.app())
    inv = write_inventory(tmp_path, {
        "ufm": {"default": {"url": url, "credentials": "ufm-api"}},
        "devices": {"leaf-su01-r1": {"ufm": {"guid": GUID, "ports": "1-40"}}}})
    ctl = UfmController(inv)
    yield fake, ctl
    await ctl.aclose()
    await runner.cleanup()


async def test_ufm_isolate_is_idempotent_and_follows_the_api(
        ufm: tuple[FakeUfm, UfmController]) -> None:
    fake, ctl = ufm
    assert not await ctl.is_isolated(PORT)
    assert await ctl.isolate(PORT) is True
    assert await ctl.isolate(PORT) is False  # a retry changes nothing
    assert fake.puts == [{"ports": ["248a0703002e628e_17"], "ports_policy": "UNHEALTHY",
                          "action": "isolate"}]
    assert await ctl.is_isolated(PORT)
    assert await ctl.unisolate(PORT) is True
    assert await ctl.unisolate(PORT) is False
    assert fake.puts[-1] == {"ports": ["248a0703002e628e_17"], "ports_policy": "HEALTHY"}
    assert not await ctl.is_isolated(PORT)
    # the inventory's GUID is used when the topology gave none
    assert await ctl.isolate(PORT.model_copy(update={"guid": None, "port": 3})) is True
    assert "248a0703002e628e_3" in fake.unhealthy


async def test_ufm_refuses_what_the_inventory_does_not_list(
        ufm: tuple[FakeUfm, UfmController]) -> None:
    fake, ctl = ufm
    cases = {
        "not a UFM device in the inventory": PORT.model_copy(update={"device": "leaf-x"}),
        "not one of leaf-su01-r1's ports": PORT.model_copy(update={"port": 41}),
        "is not the inventory's": PORT.model_copy(update={"guid": "0x248a0703002e6200"}),
    }
    for why, port in cases.items():
        for call in (ctl.isolate, ctl.unisolate, ctl.is_isolated, ctl.reset_counters):
            with pytest.raises(AdapterRejected, match=why):
                await call(port)
    assert fake.puts == []  # refused before any request


async def test_ufm_wrong_password_is_a_rejection_without_the_secret(tmp_path: Path) -> None:
    fake = FakeUfm({"248a0703002e628e_17"})
    runner, url = await serve(fake.app())
    inv = write_inventory(tmp_path, {
        "ufm": {"default": {"url": url}},
        "devices": {"leaf-su01-r1": {"ufm": {"guid": GUID, "ports": [17]}}}})
    # no credentials in the inventory: the settings' secrets (here a wrong one) are used
    ctl = UfmController(inv, default_login=("admin", SecretStr("wrong-password-xyz")))
    try:
        with pytest.raises(AdapterRejected) as info:
            await ctl.isolate(PORT)
        assert "401" in str(info.value) and "wrong-password-xyz" not in str(info.value)
    finally:
        await ctl.aclose()
        await runner.cleanup()


def test_ufm_port_names() -> None:
    assert ufm_port_name(PORT) == "248a0703002e628e_17"
    assert ufm_port_name(PORT.model_copy(update={"guid": "2E628E", "port": 1})) == \
        "00000000002e628e_1"
    for guid in (None, "0xZZ", "x; rm -rf /"):
        with pytest.raises(AdapterRejected):
            ufm_port_name(PORT.model_copy(update={"guid": guid}))


async def test_ufm_unreachable_is_retryable(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, {
        "ufm": {"default": {"url": "http://127.0.0.1:9", "credentials": "ufm-api"}},
        "devices": {"leaf-su01-r1": {"ufm": {"guid": GUID, "ports": [17]}}}})
    ctl = UfmController(inv, timeout_s=2)
    try:
        with pytest.raises(AdapterError) as info:
            await ctl.isolate(PORT)
        assert not isinstance(info.value, AdapterRejected)
    finally:
        await ctl.aclose()


# --- SONiC ----------------------------------------------------------------------------------

async def test_sonic_aims_at_the_inventorys_switch_and_interface(tmp_path: Path) -> None:
    """Two switches, both with an "Ethernet8": only the one the inventory names is shut."""
    r1 = FakeSonic({"Ethernet0", "Ethernet8", "Ethernet64"})
    r3 = FakeSonic({"Ethernet0", "Ethernet8", "Ethernet32"}, password="other-pass")
    run1, url1 = await serve(r1.app())
    run3, url3 = await serve(r3.app())
    (tmp_path / "r3-password").write_text("other-pass")
    inv = write_inventory(tmp_path, {
        "credentials": {
            "sonic-admin": {"username": "admin",
                            "password_file": str(tmp_path / "sonic-password")},
            "r3": {"username": "admin", "password_file": str(tmp_path / "r3-password")}},
        "devices": {
            "leaf-su02-r1": {"sonic": {"url": url1, "credentials": "sonic-admin",
                                       "interfaces": {"17": "Ethernet64"}}},
            "leaf-su02-r3": {"sonic": {"url": url3, "credentials": "r3",
                                       "interfaces": {8: "Ethernet32"}}},
            "leaf-su02-r5": {"sonic": {"url": url1, "credentials": "sonic-admin",
                                       "interface_template": "Ethernet{port}",
                                       "ports": "1-8"}}}})
    ctl = SonicController(inv)
    port = PortRef(fabric="roce", device="leaf-su02-r3", port=8)
    try:
        assert ctl.interface(port) == "Ethernet32"
        assert await ctl.isolate(port) is True
        assert await ctl.isolate(port) is False
        assert r3.patches == [("Ethernet32", {"openconfig-interfaces:enabled": False})]
        assert r1.patches == [] and r3.enabled["Ethernet8"] is True  # not a guessed name
        assert await ctl.is_isolated(port)
        assert await ctl.unisolate(port) is True and r3.enabled["Ethernet32"] is True
        other = PortRef(fabric="roce", device="leaf-su02-r1", port=17)
        assert await ctl.isolate(other) is True and r1.enabled["Ethernet64"] is False
        # the explicit per-device template
        templ = PortRef(fabric="roce", device="leaf-su02-r5", port=8)
        assert ctl.interface(templ) == "Ethernet8"
        assert await ctl.isolate(templ) is True and r1.enabled["Ethernet8"] is False
        before = (list(r1.patches), list(r3.patches))
        for bad, why in ((PortRef(fabric="roce", device="leaf-su02-r3", port=9),
                          "names no interface for port 9"),
                         (PortRef(fabric="roce", device="leaf-su02-r5", port=9),
                          "names no interface for port 9"),
                         (PortRef(fabric="roce", device="leaf-su09-r1", port=1),
                          "not a SONiC device in the inventory")):
            for call in (ctl.isolate, ctl.unisolate, ctl.is_isolated, ctl.reset_counters):
                with pytest.raises(AdapterRejected, match=why):
                    await call(bad)
        assert (r1.patches, r3.patches) == before  # refused before any request
    finally:
        await ctl.aclose()
        await run1.cleanup()
        await run3.cleanup()


async def test_sonic_interface_the_switch_lacks_is_a_rejection(tmp_path: Path) -> None:
    """The inventory names an interface the switch does not have: RESTCONF 404, no retry."""
    sw = FakeSonic({"Ethernet0"})
    runner, url = await serve(sw.app())
    inv = write_inventory(tmp_path, {"devices": {"leaf-su01-r1": {"sonic": {
        "url": url, "credentials": "sonic-admin", "interfaces": {17: "Ethernet68"}}}}})
    ctl = SonicController(inv)
    try:
        with pytest.raises(AdapterRejected, match="404"):
            await ctl.isolate(PORT)
    finally:
        await ctl.aclose()
        await runner.cleanup()


async def test_sonic_refuses_a_device_or_port_the_inventory_does_not_name(
        tmp_path: Path) -> None:
    sw = FakeSonic({"Ethernet68"})
    runner, url = await serve(sw.app())
    inv = write_inventory(tmp_path, {"devices": {"leaf-su01-r1": {"sonic": {
        "url": url, "credentials": "sonic-admin", "interfaces": {17: "Ethernet68"}}}}})
    ctl = SonicController(inv)
    try:
        for port in (PORT.model_copy(update={"device": "$(touch x)"}),
                     PORT.model_copy(update={"device": "leaf-su01-r1\u202egnp.exe"}),
                     PORT.model_copy(update={"port": 18})):
            for call in (ctl.isolate, ctl.unisolate, ctl.is_isolated, ctl.reset_counters):
                with pytest.raises(AdapterRejected):
                    await call(port)
            with pytest.raises(AdapterRejected):
                await ctl.repair_step(port, "swap-optic")
        assert sw.patches == [] and sw.enabled == {"Ethernet68": True}  # nothing changed
    finally:
        await ctl.aclose()
        await runner.cleanup()


# --- ticket webhook -------------------------------------------------------------------------

async def test_webhook_tickets_carry_idempotency_keys() -> None:
    seen: list[tuple[str, dict[str, Any], str]] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append((request.headers["Idempotency-Key"], body,
                     request.headers.get("Authorization", "")))
        return web.json_response({"ticket_id": "INC-42"} if body["op"] == "open" else {})

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner, url = await serve(app)
    t = WebhookTicketing(url + "/hook", SecretStr("tok"))
    try:
        assert await t.open("remediate/lab/x:1", "flap", {"a": 1}) == "INC-42"
        assert await t.open("remediate/lab/x:1", "flap", {"a": 1}) == "INC-42"
        await t.update("remediate/lab/x:1", "reminder", {})
        await t.close("remediate/lab/x:1", "fixed", {})
    finally:
        await t.aclose()
        await runner.cleanup()
    keys = [k for k, _, _ in seen]
    assert keys[0] == keys[1] == "remediate/lab/x:1:open"  # a retried open: the same key
    assert keys[2].startswith("remediate/lab/x:1:update:") and keys[3].startswith(
        "remediate/lab/x:1:close:")
    assert seen[0][1] == {"op": "open", "key": "remediate/lab/x:1", "summary": "flap",
                          "details": {"a": 1}}
    assert all(auth == "Bearer tok" for _, _, auth in seen)
