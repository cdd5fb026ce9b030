"""The additive sample fields of issue 22: ``device`` (a host's one message) and ``error``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "mlx5_0", "mlx5_1", "mlx5_2"]),
                          st.integers(0, 3), st.booleans()), min_size=1, max_size=12),
       st.dictionaries(st.sampled_from(["agent", "seq"]), st.integers(0, 9), max_size=2))
def test_split_equals_model_copy_per_device(rows: list[tuple[str | None, int, bool]],
                                            extra: dict[str, int]) -> None:
    # the hot path's split builds its parts without model_copy: the same models, fields set,
    # extras and wire bytes as model_copy(update=...) gives
    ports = [PortSample(port=i + 1, device=None if hca is None else f"node7/{hca}",
                        symbol_errors=errs, error="gone" if bad else None)
             for i, (hca, errs, bad) in enumerate(rows)]
    msg = decode(encode(Counters(id="m", ts=1_700_000_000_000, fabric="lab",
                                 source="host_agent", device="node7", ports=ports,
                                 **extra)))  # type: ignore[arg-type]
    assert isinstance(msg, Counters)
    groups: dict[str, list[PortSample]] = {}
    for sample in msg.ports:
        groups.setdefault(sample.device or msg.device, []).append(sample)
    want = ([msg] if all(s.device is None for s in msg.ports) else
            [msg.model_copy(update={"id": f"{msg.id}/{name}", "device": name,
                                    "ports": samples}) for name, samples in groups.items()])
    got = msg.split()
    assert got == want
    assert [p.model_fields_set for p in got] == [p.model_fields_set for p in want]
    assert [p.__pydantic_extra__ for p in got] == [p.__pydantic_extra__ for p in want]
    assert [encode(p) for p in got] == [encode(p) for p in want]


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
