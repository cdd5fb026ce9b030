"""The controllers' device inventory: which management endpoint owns a device, and its ports.

A runbook names a port as ``device:port``; a controller that changes a real fabric must know
which switch that is and what the port is called there, or refuse. The inventory is a file
(YAML, or JSON by its ``.json`` suffix) that the fabric team keeps with their cabling data::

    version: 1
    credentials:                       # by reference only: files, never inline secrets
      sonic-admin: {username: admin, password_file: /var/run/secrets/fabricwatch/sonic/password}
      ufm-api: {username_file: /var/run/secrets/fabricwatch/ufm/username,
                password_file: /var/run/secrets/fabricwatch/ufm/password}
    ufm:                               # UFM appliances (one per InfiniBand subnet)
      default: {url: "https://ufm.mgmt.example", credentials: ufm-api}
    devices:
      leaf-su01-r3:                    # a SONiC switch (RoCE): its RESTCONF URL and names
        sonic:
          url: "https://leaf-su01-r3.mgmt.example"
          credentials: sonic-admin
          interfaces: {1: Ethernet0, 2: Ethernet8, 17: Ethernet128}
      leaf-su02-r0:
        sonic:
          url: "https://leaf-su02-r0.mgmt.example"
          interface_template: "Ethernet{port}"   # explicit, for this device only
          ports: "1-64"
      ib-leaf-su01-r1:                 # an InfiniBand switch behind UFM: its node GUID
        ufm: {guid: "0x248a0703002e628e", ports: "1-64", instance: default}

Nothing is guessed: a device not in the file, a port not in its ``interfaces`` / ``ports``, or
a SONiC device without names for its ports is refused (``AdapterRejected``, with the reason).
A ``credentials`` entry may be omitted; the settings' secrets are used then
(``FABRICWATCH_SECRETS__SONIC_*`` / ``__UFM_*``). A ``password`` or ``token`` written into the
file is refused at load time, so a secret never sits in a ConfigMap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from runtime.settings import SecretFileError, read_secret
from workflows.adapters.base import AdapterRejected

_IFNAME = re.compile(r"^[A-Za-z][A-Za-z0-9/._-]{0,63}$")
_DEVICE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./:@+-]{0,127}$")
_GUID = re.compile(r"^(?:0x)?([0-9a-fA-F]{16})$")
_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_SECRET_KEYS = ("password", "token", "secret", "api_key", "m_key", "sm_key")
MAX_PORT = 4096


class InventoryError(ValueError):
    """The inventory file cannot be read or is not valid (the message says where and why)."""


def parse_ports(spec: str | int | list[Any]) -> frozenset[int]:
    """``"1-32,40"``, ``17`` or ``[1, 2, "5-8"]`` -> the port numbers (1..4096)."""
    items: list[Any] = spec if isinstance(spec, list) else [spec]
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not a port number")
        parts = [item] if isinstance(item, int) else str(item).split(",")
        for part in parts:
            if isinstance(part, int):
                lo = hi = part
            else:
                text = part.strip(" \t")
                m = re.fullmatch(r"([0-9]{1,4})(?:[ \t]*-[ \t]*([0-9]{1,4}))?", text)
                if m is None:
                    raise ValueError(f"{text!r} is not a port, nor a range like 1-32")
                lo = int(m.group(1))
                hi = int(m.group(2)) if m.group(2) else lo
            if not 1 <= lo <= hi <= MAX_PORT:
                raise ValueError(f"port range {lo}-{hi} is not within 1..{MAX_PORT}")
            out.update(range(lo, hi + 1))
    if not out:
        raise ValueError("no ports")
    return frozenset(out)


def _url(value: str) -> str:
    if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?(/[^\s@]*)?", value):
        raise ValueError(f"{value!r} is not an http(s) URL without credentials")
    return value.rstrip("/")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_inline_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if str(key).lower() in _SECRET_KEYS:
                    raise ValueError(f"{key!r}: secrets are given by reference only "
                                     f"(use {key}_file: PATH)")
        return data


class Credentials(_Model):
    """A login by reference: the username (not secret) or its file, the password's file."""

    username: str | None = None
    username_file: Path | None = None
    password_file: Path

    @model_validator(mode="after")
    def _one_username(self) -> Credentials:
        if (self.username is None) == (self.username_file is None):
            raise ValueError("give exactly one of username, username_file")
        return self

    def login(self, what: str) -> tuple[str, SecretStr]:
        try:
            user = self.username
            if user is None:
                found = read_secret(None, self.username_file, f"{what} username")
                user = found.get_secret_value() if found else ""
            password = read_secret(None, self.password_file, f"{what} password")
        except SecretFileError as exc:
            raise InventoryError(str(exc)) from None
        if not user or password is None or not password.get_secret_value():
            raise InventoryError(f"{what}: the username or password file is empty")
        return user, password


class _Ported(_Model):
    ports: frozenset[int] | None = None

    @field_validator("ports", mode="before")
    @classmethod
    def _ports(cls, value: Any) -> Any:
        return None if value is None else parse_ports(value)


class SonicDevice(_Ported):
    """A SONiC switch: its RESTCONF URL and what each front-panel port is called."""

    url: str
    credentials: str | None = None
    interfaces: dict[int, str] = Field(default_factory=dict)
    interface_template: str | None = None  # e.g. "Ethernet{port}", only when written here
    verify_tls: bool = True

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value)

    @model_validator(mode="after")
    def _names(self) -> SonicDevice:
        for port, name in self.interfaces.items():
            if not 1 <= port <= MAX_PORT:
                raise ValueError(f"interfaces: port {port} is not within 1..{MAX_PORT}")
            if not _IFNAME.match(name):
                raise ValueError(f"interfaces: {name!r} is not a SONiC interface name")
        if self.interface_template is not None:
            if self.ports is None:
                raise ValueError("interface_template needs ports (which ports it names)")
            if "{port}" not in self.interface_template:
                raise ValueError("interface_template must contain {port}")
            for port in sorted(self.ports)[:1] + sorted(self.ports)[-1:]:
                if not _IFNAME.match(self._format(port)):
                    raise ValueError(f"interface_template gives {self._format(port)!r}, not "
                                     "a SONiC interface name")
        elif not self.interfaces:
            raise ValueError("give interfaces (port -> name) or interface_template with ports")
        return self

    def _format(self, port: int) -> str:
        try:
            return str(self.interface_template).format(port=port)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"interface_template: {exc}") from None

    def known_ports(self) -> frozenset[int]:
        tpl = self.ports if self.interface_template is not None and self.ports else frozenset()
        return frozenset(self.interfaces) | tpl

    def interface(self, port: int) -> str | None:
        if port in self.interfaces:
            return self.interfaces[port]
        if self.interface_template is not None and self.ports and port in self.ports:
            name = self._format(port)
            return name if _IFNAME.match(name) else None
        return None


class UfmDevice(_Ported):
    """A device managed by UFM: its node GUID and ports, and which UFM manages it."""

    guid: str
    instance: str = "default"

    @field_validator("guid")
    @classmethod
    def _guid(cls, value: str) -> str:
        m = _GUID.match(value.strip())
        if m is None:
            raise ValueError(f"{value!r} is not a node GUID (16 hex digits, 0x optional)")
        return m.group(1).lower()

    @model_validator(mode="after")
    def _has_ports(self) -> UfmDevice:
        if self.ports is None:
            raise ValueError("ports is required (which ports UFM may isolate)")
        if max(self.ports) > 255:
            raise ValueError("an InfiniBand port number is 1..255")
        return self


class UfmInstance(_Model):
    url: str
    credentials: str | None = None
    verify_tls: bool = True

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value)


class DeviceEntry(_Model):
    sonic: SonicDevice | None = None
    ufm: UfmDevice | None = None


class DeviceInventory(_Model):
    """The whole file, validated: references resolve, names are device names."""

    version: Literal[1] = 1
    fabric: str | None = None
    credentials: dict[str, Credentials] = Field(default_factory=dict)
    ufm: dict[str, UfmInstance] = Field(default_factory=dict)
    devices: dict[str, DeviceEntry]

    @model_validator(mode="after")
    def _references(self) -> DeviceInventory:
        for name in (*self.credentials, *self.ufm):
            if not _REF.match(name):
                raise ValueError(f"{name!r} is not a reference name")
        for ref in [i.credentials for i in self.ufm.values()]:
            if ref is not None and ref not in self.credentials:
                raise ValueError(f"ufm: credentials {ref!r} are not defined")
        for device, entry in self.devices.items():
            if not _DEVICE.match(device):
                raise ValueError(f"devices: {device!r} is not a device name")
            if entry.sonic is None and entry.ufm is None:
                raise ValueError(f"devices.{device}: give sonic or ufm")
            if entry.sonic and entry.sonic.credentials is not None \
                    and entry.sonic.credentials not in self.credentials:
                raise ValueError(f"devices.{device}.sonic: credentials "
                                 f"{entry.sonic.credentials!r} are not defined")
            if entry.ufm and entry.ufm.instance not in self.ufm:
                raise ValueError(f"devices.{device}.ufm: UFM instance {entry.ufm.instance!r} "
                                 "is not defined under ufm")
        return self

    # -- lookups the controllers make ---------------------------------------------------------

    def sonic(self, device: str, port: int) -> tuple[SonicDevice, str]:
        """The switch and the interface name of ``device:port``, or AdapterRejected."""
        entry = self.devices.get(device)
        if entry is None or entry.sonic is None:
            raise AdapterRejected(f"{device}:{port}: {device!r} is not a SONiC device in the "
                                  "inventory")
        name = entry.sonic.interface(port)
        if name is None:
            raise AdapterRejected(f"{device}:{port}: the inventory names no interface for port "
                                  f"{port} of {device}")
        return entry.sonic, name

    def ufm_port(self, device: str, port: int) -> tuple[str, UfmDevice]:
        """(UFM instance, device) of ``device:port``, or AdapterRejected."""
        entry = self.devices.get(device)
        if entry is None or entry.ufm is None:
            raise AdapterRejected(f"{device}:{port}: {device!r} is not a UFM device in the "
                                  "inventory")
        if entry.ufm.ports is None or port not in entry.ufm.ports:
            raise AdapterRejected(f"{device}:{port}: port {port} is not one of {device}'s "
                                  "ports in the inventory")
        return entry.ufm.instance, entry.ufm

    def login(self, ref: str | None, fallback: tuple[str, SecretStr] | None,
              what: str) -> tuple[str, SecretStr]:
        """The login of a credentials reference (files read now), else the fallback."""
        if ref is not None:
            return self.credentials[ref].login(f"{what} ({ref})")
        if fallback is None:
            raise InventoryError(f"{what}: no credentials in the inventory and none in the "
                                 "settings' secrets")
        return fallback


def load_device_inventory(path: Path) -> DeviceInventory:
    """Read and validate an inventory file; ``InventoryError`` says what is wrong, and where."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InventoryError(f"{path}: {exc.strerror}") from None
    try:
        data = orjson.loads(raw) if str(path).endswith(".json") else yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise InventoryError(f"{path}: not valid {'JSON' if str(path).endswith('.json') else 'YAML'}"
                             f": {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InventoryError(f"{path}: the inventory is a mapping with 'devices'")
    try:
        return DeviceInventory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        # the message never echoes input values of secret-looking keys (they are refused)
        raise InventoryError(f"{path}: {where}: {first['msg']}"
                             + (f" (and {exc.error_count() - 1} more)"
                                if exc.error_count() > 1 else "")) from None
