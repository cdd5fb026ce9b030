"""The additive sample fields of issue 22: ``device`` (a host's one message) and ``error``."""

from __future__ import annotations

import pytest

from schemas import ContractError, Counters, PortSample, decode, encode


def host_message(**extra: object) -> Counters:
    return Counters(id="m1", ts=1_700_000_000_000, fabric="lab", source="host_agent",
                    device="node0042", ports=[
                        PortSample(port=1, device="node0042/mlx5_0", symbol_errors=3),
                        PortSample(port=1, device="node0042/mlx5_1", error="gone"),
                        PortSample(port=2, device="node0042/mlx5_1", rcv_errors=1)],
                    **extra)  # type: ignore[arg-type]


def test_split_gives_one_message_per_device() -> None:
    parts = host_message().split()
    assert [(p.id, p.device, [s.port for s in p.ports]) for p in parts] == [
        ("m1/node0042/mlx5_0", "node0042/mlx5_0", [1]),
        ("m1/node0042/mlx5_1", "node0042/mlx5_1", [1, 2])]
    assert all(s.device == p.device for p in parts for s in p.ports)
    assert parts[1].ports[0].error == "gone" and parts[0].ports[0].symbol_errors == 3
    assert all(p.ts == 1_700_000_000_000 and p.source == "host_agent" for p in parts)


def test_plain_message_splits_to_itself_and_round_trips() -> None:
    plain = Counters(id="x", ts=1, fabric="lab", source="gnmi", device="leaf1",
                     ports=[PortSample(port=1)])
    assert plain.split() == [plain]
    again = decode(encode(host_message()))
    assert isinstance(again, Counters) and again.split() == host_message().split()


def test_bad_sample_device_or_repeated_port_is_refused() -> None:
    good = encode(host_message()).decode()
    with pytest.raises(ContractError) as exc:
        decode(good.replace('"error":"gone","device":"node0042/mlx5_1"',
                           '"error":"gone","device":"node0042/mlx5_0"').encode())
    assert exc.value.path == "ports.1"
    with pytest.raises(ContractError):
        decode(good.replace("node0042/mlx5_0", "bad\\u0001name").encode())
    with pytest.raises(ContractError):
        decode(good.replace('"error":"gone"', '"error":""').encode())
