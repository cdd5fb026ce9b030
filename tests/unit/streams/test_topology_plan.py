"""The cable plan loader: columns, normalisation, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import ContractError, Topology, TopologyLink
from streams.topology.plan import (
    Plan,
    PlanError,
    PlanLink,
    expectation_from_plan,
    load_plan,
    load_plan_file,
    normalize_guid,
    plan_from_topology,
)


def test_minimal_columns_any_order_and_case() -> None:
    plan = load_plan("B_PORT, a_device ,b_device,A_Port\n5,node0001/mlx5_0,leaf-su01-r0,1\n")
    assert plan.links == (PlanLink("node0001/mlx5_0", 1, "leaf-su01-r0", 5, line=2),)
    assert plan.columns == ("a_device", "a_port", "b_device", "b_port")


def test_optional_columns_comments_blank_lines_bom_and_extra_columns() -> None:
    text = ("\ufeff# exported from DCIM\n"
            "a_device,a_port,b_device,b_port,cable_id,width,speed,rack\n"
            "\n"
            "leaf-su01-r3,1,spine-01,7,CBL-0001,4x,ndr,A12\n"
            "# a comment between links\n"
            "leaf-su01-r3,2,spine-02,7,,,,A12\n"
            "leaf-su01-r3,3,spine-03,7,CBL-3,4xNDR,,A12\n")
    plan = load_plan(text)
    assert [(x.cable_id, x.width, x.speed, x.line) for x in plan.links] == [
        ("CBL-0001", "4X", "NDR", 4), (None, None, None, 6), ("CBL-3", "4X", "NDR", 7)]


def test_guids_are_normalised() -> None:
    plan = load_plan("a_device,a_port,b_device,b_port\n0xB8599F0300FC6DE4,3,"
                     "0002c903007b78b0,1\n0x2c9,1,sw,2\n")
    assert plan.links[0].a_device == "0xb8599f0300fc6de4"
    assert plan.links[0].b_device == "0x0002c903007b78b0"
    assert plan.links[1].a_device == "0x00000000000002c9"
    assert normalize_guid("leaf-su01-r3") is None
    assert normalize_guid("deadbeef") is None  # 8 hex digits without 0x is a name, not a GUID


@pytest.mark.parametrize(("text", "line", "words"), [
    ("", 0, "empty"),
    ("a_device,a_port,b_device\nx,1,y\n", 1, "lacks column(s) b_port"),
    ("a_device,a_port,b_device,b_port,a_port\n", 1, "appear twice"),
    ("a_device,a_port,b_device,b_port\nx,one,y,2\n", 2, "a_port 'one' is not a port number"),
    ("a_device,a_port,b_device,b_port\nx,1,y,-2\n", 2, "b_port '-2' is not a port number"),
    ("a_device,a_port,b_device,b_port\nx,1,y,2000\n", 2, "outside 0..1024"),
    ("a_device,a_port,b_device,b_port\n,1,y,2\n", 2, "a_device is empty"),
    ("a_device,a_port,b_device,b_port\nx,1,y\n", 2, "3 field(s) where the header has 4"),
    ("a_device,a_port,b_device,b_port\nx,1,x,1\n", 2, "cabled to itself"),
    ("a_device,a_port,b_device,b_port\nx,1,y,1\n\nz,1,y,1\n", 4,
     "port y:1 is planned twice (first on line 2)"),
    ("a_device,a_port,b_device,b_port,width\nx,1,y,1,3X\n", 2, "width '3X' is not one of"),
    ("a_device,a_port,b_device,b_port,speed\nx,1,y,1,fast\n", 2, "speed 'fast' is not one of"),
    ("a_device,a_port,b_device,b_port\nx\x01,1,y,1\n", 2, "control character"),
    ("a_device,a_port,b_device,b_port\n\"x,1,y,1\n", 2, "not valid CSV"),
    ("a_device\x00", 0, "binary"),
])
def test_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        load_plan(text)
    assert caught.value.line == line
    assert words in caught.value.reason
    assert isinstance(caught.value, ContractError)
    assert (f"plan line {line}" if line else "plan") == caught.value.path


def test_plan_built_in_code_is_checked_too() -> None:
    with pytest.raises(PlanError, match="planned twice"):
        Plan((PlanLink("a", 1, "b", 1), PlanLink("c", 1, "a", 1)))


def test_round_trip_through_csv_and_from_topology() -> None:
    topology = Topology(id="t", ts=0, fabric="f", source="test", links=[
        TopologyLink(a_device="sw", a_port=1, b_device="n/mlx5_0", b_port=1, width="4X",
                     speed="NDR"),
        TopologyLink(a_device="sw", a_port=2, b_device="0xABC", b_port=1, width="4X",
                     speed="???"),
        TopologyLink(a_device="n/mlx5_0", a_port=1, b_device="sw", b_port=1),  # reported twice
    ])
    plan = plan_from_topology(topology, cable_prefix="C")
    assert [(x.a_device, x.b_device, x.cable_id, x.speed) for x in plan.links] == [
        ("sw", "n/mlx5_0", "C1", "NDR"), ("sw", "0x0000000000000abc", "C2", None)]
    again = load_plan(plan.to_csv())
    assert [(x.a, x.b, x.cable_id, x.width, x.speed) for x in again.links] == [
        (x.a, x.b, x.cable_id, x.width, x.speed) for x in plan.links]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_raises_only_plan_error(text: str) -> None:
    try:
        load_plan("a_device,a_port,b_device,b_port,cable_id,width,speed\n" + text)
    except PlanError:
        pass


def test_load_plan_file_names_the_file_and_line(tmp_path: Path) -> None:
    good = tmp_path / "plan.csv"
    good.write_text("a_device,a_port,b_device,b_port\nx,1,y,1\n")
    assert len(load_plan_file(good)) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("a_device,a_port,b_device,b_port\nx,1,y,one\n")
    with pytest.raises(PlanError) as caught:
        load_plan_file(bad)
    assert caught.value.line == 2 and str(bad) in caught.value.reason
    with pytest.raises(PlanError, match="cannot read plan file"):
        load_plan_file(tmp_path / "absent.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PlanError, match="not UTF-8"):
        load_plan_file(binary)


def test_expectation_from_plan() -> None:
    plan = load_plan("a_device,a_port,b_device,b_port,width,speed\n"
                     "leaf,1,node/mlx5_0,1,4X,NDR\nleaf,2,node/mlx5_1,1,,\n"
                     "0xb8599f0300fc6de4,3,leaf,3,,HDR\n")
    expect = expectation_from_plan(plan, {"0xB8599F0300FC6DE4": "r-ufm-sw95"})
    assert expect("leaf", 1) == expect("node/mlx5_0", 1) == ("4X", "NDR")
    assert expect("leaf", 2) is None and expect("nowhere", 1) is None
    assert expect("r-ufm-sw95", 3) == (None, "HDR")


def test_media_from_plan() -> None:
    from streams.topology.plan import media_from_plan

    plan = load_plan("a_device,a_port,b_device,b_port,media\n"
                     "leaf,1,node/mlx5_0,1,Copper\nleaf,2,node/mlx5_1,1,\n"
                     "leaf,3,spine,3,active\n")
    media = media_from_plan(plan)
    assert media("leaf", 1) == media("node/mlx5_0", 1) == "copper"
    assert media("leaf", 2) is None and media("spine", 3) == "active"
    assert load_plan(plan.to_csv()).links == plan.links
    with pytest.raises(PlanError, match="line 2.*media 'wet-string' is not one of dac"):
        load_plan("a_device,a_port,b_device,b_port,media\nleaf,1,node/mlx5_0,1,wet-string\n")


def test_names_written_as_node_descriptions_follow_the_naming_rule() -> None:
    plan = load_plan("a_device,a_port,b_device,b_port\n"
                     "MF0;leaf-su01-r3:MQM9700/U1,1,node0042  mlx5_3,1\n"
                     "leaf-su01-r3,2,some  long   description here,1\n")
    assert plan.links[0].a == ("leaf-su01-r3", 1)
    assert plan.links[0].b == ("node0042/mlx5_3", 1)
    assert plan.links[1].b == ("some long description here", 1)
