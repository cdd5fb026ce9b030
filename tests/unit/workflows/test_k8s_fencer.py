"""Node fencing against a loopback API server that enforces what the real one does: taints
unique by key and effect (422), 409 on a stale resourceVersion, 404 for a missing node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.kube_api import KubeApi, core_api, node

from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.k8s import LEGACY_TAINT_KEY, K8sNodeFencer, rail_key, rail_taint

OTHER = {"key": "other", "value": "x", "effect": "NoExecute"}


@pytest.fixture
def kube() -> Iterator[KubeApi]:
    api = KubeApi()
    api.add(node("node0001", labels={"zone": "a"}, taints=[OTHER]))
    api.serve()
    yield api
    api.close()


def fencer(api: KubeApi, **kw: int) -> K8sNodeFencer:
    assert api._server is not None
    return K8sNodeFencer(core_api(f"http://127.0.0.1:{api._server.server_address[1]}"), **kw)


def test_the_fake_refuses_what_the_api_server_refuses(kube: KubeApi) -> None:
    """The fake's rules, checked directly: a fencer written against a lax fake would pass."""
    import orjson

    n = kube.nodes["node0001"]
    dup = orjson.loads(orjson.dumps(n))
    dup["spec"]["taints"] = [OTHER, dict(OTHER, value="y")]
    assert kube.handle("PUT", "/api/v1/nodes/node0001", orjson.dumps(dup))[0] == 422
    stale = orjson.loads(orjson.dumps(n))
    stale["metadata"]["resourceVersion"] = "1"
    assert kube.handle("PUT", "/api/v1/nodes/node0001", orjson.dumps(stale))[0] == 409
    assert kube.handle("GET", "/api/v1/nodes/nope", b"")[0] == 404
    fine = orjson.loads(orjson.dumps(n))
    fine["spec"]["taints"] = [OTHER, dict(OTHER, effect="NoSchedule")]  # same key, other effect
    assert kube.handle("PUT", "/api/v1/nodes/node0001", orjson.dumps(fine))[0] == 200


async def test_two_rails_of_one_node_are_fenced_and_unfenced_apart(kube: KubeApi) -> None:
    f = fencer(kube)
    assert await f.fence("node0001", 3, "leaf-su01-r3:17 isolated by remediate/lab/x") is True
    assert await f.fence("node0001", 5, "leaf-su01-r5:17 isolated by remediate/lab/y") is True
    n = kube.nodes["node0001"]
    taints = n["spec"]["taints"]
    assert rail_taint(3) in taints and rail_taint(5) in taints and OTHER in taints
    assert rail_taint(3) == {"key": "fabricwatch.io/rail-3", "value": "isolated",
                             "effect": "NoSchedule"}
    assert n["metadata"]["labels"] == {"zone": "a", "fabricwatch.io/rail-3": "isolated",
                                       "fabricwatch.io/rail-5": "isolated"}
    assert await f.fenced_rails("node0001") == {
        3: "leaf-su01-r3:17 isolated by remediate/lab/x",
        5: "leaf-su01-r5:17 isolated by remediate/lab/y"}
    assert await f.fence("node0001", 3, "again") is False  # idempotent: no write
    assert len(kube.writes()) == 2
    assert await f.unfence("node0001", 3) is True
    n = kube.nodes["node0001"]
    assert rail_taint(3) not in n["spec"]["taints"] and rail_taint(5) in n["spec"]["taints"]
    assert n["metadata"]["labels"] == {"zone": "a", "fabricwatch.io/rail-5": "isolated"}
    assert await f.fenced_rails("node0001") == {5: "leaf-su01-r5:17 isolated by remediate/lab/y"}
    assert await f.unfence("node0001", 3) is False
    assert await f.unfence("node0001", 5) is True
    n = kube.nodes["node0001"]
    assert n["spec"]["taints"] == [OTHER] and n["metadata"]["labels"] == {"zone": "a"}
    assert not n["metadata"].get("annotations")


async def test_a_taint_or_label_someone_else_set_is_never_removed(kube: KubeApi) -> None:
    mine = {"key": rail_key(2), "value": "drained-by-ops", "effect": "NoSchedule"}
    kube.add(node("node0002", labels={rail_key(4): "maintenance"}, taints=[mine]))
    f = fencer(kube)
    # rail 2 already carries an operator's taint with our key: fabricwatch claims nothing
    assert await f.fence("node0002", 2, "x") is False
    assert await f.unfence("node0002", 2) is False
    assert await f.fence("node0002", 4, "x") is False  # an operator's label with the key
    assert await f.unfence("node0002", 4) is False
    n = kube.nodes["node0002"]
    assert n["spec"]["taints"] == [mine] and n["metadata"]["labels"] == {rail_key(4):
                                                                           "maintenance"}
    assert kube.writes() == []


async def test_a_stale_read_gets_409_and_the_fencer_reads_again(kube: KubeApi) -> None:
    f = fencer(kube)
    touched: list[str] = []

    def another_writer(path: str) -> None:
        if len(touched) < 2:  # the first two reads go stale before the PUT
            touched.append(path)
            kube.touch("node0001", **{f"team.example/t{len(touched)}": "y"})

    kube.after_get.append(another_writer)
    assert await f.fence("node0001", 1, "x") is True
    codes = [c for m, _, c in kube.requests if m == "PUT"]
    assert codes == [409, 409, 200]
    labels = kube.nodes["node0001"]["metadata"]["labels"]
    # the other writer's labels survive: nothing was overwritten
    assert labels["team.example/t1"] == labels["team.example/t2"] == "y"
    assert labels[rail_key(1)] == "isolated"


async def test_conflicts_without_end_are_a_retryable_error(kube: KubeApi) -> None:
    f = fencer(kube, conflict_retries=3)
    kube.after_get.append(lambda path: kube.touch("node0001", churn="y"))
    with pytest.raises(AdapterError) as info:
        await f.fence("node0001", 1, "x")
    assert not isinstance(info.value, AdapterRejected) and "3 attempts" in str(info.value)
    assert [c for m, _, c in kube.requests if m == "PUT"] == [409, 409, 409]


async def test_missing_node_and_bad_names_are_rejections(kube: KubeApi) -> None:
    f = fencer(kube)
    with pytest.raises(AdapterRejected, match="does not exist"):
        await f.fence("nope", 1, "x")
    with pytest.raises(AdapterRejected, match="not a Kubernetes node name"):
        await f.fence("Bad_Name;", 1, "x")
    with pytest.raises(AdapterRejected, match="not a rail"):
        await f.fence("node0001", -1, "x")
    assert ("GET", "/api/v1/nodes/Bad_Name;", 404) not in kube.requests  # never sent


async def test_the_first_fencers_shared_taint_is_cleaned_up_on_unfence(kube: KubeApi) -> None:
    legacy = {"key": LEGACY_TAINT_KEY, "value": "rail-3", "effect": "NoSchedule"}
    kube.add(node("node0003", labels={"fabricwatch.io/rail-3-isolated": "true"},
                  taints=[legacy, OTHER]))
    f = fencer(kube)
    assert await f.unfence("node0003", 3) is True
    n = kube.nodes["node0003"]
    assert n["spec"]["taints"] == [OTHER] and n["metadata"]["labels"] == {}


async def test_the_runbook_activities_fence_two_rails_of_one_node(kube: KubeApi,
                                                                  tmp_path: Path) -> None:
    """Two isolated ports behind one node (rails 1 and 2), through the runbook's activities:
    both fenced, one unfenced keeps the other; a missing node is a non-retryable failure."""
    from temporalio.exceptions import ApplicationError

    from workflows.adapters.notify import FileNotifier
    from workflows.adapters.records import MemorySink
    from workflows.adapters.ticket import NotifierTicketing
    from workflows.adapters.tools import CommandChecker, FabricToolsEvidence
    from workflows.remediation.activities import FabricActivities
    from workflows.remediation.models import ControlInput, PortRef

    class NoController:
        name = "none"

    acts = FabricActivities(records=MemorySink(), controller=NoController(),  # type: ignore[arg-type]
                            evidence=FabricToolsEvidence(), checker=CommandChecker({}),
                            fencer=fencer(kube),
                            ticketing=NotifierTicketing(FileNotifier(tmp_path / "alerts.jsonl")))

    def inp(rail: int, node_name: str = "node0001") -> ControlInput:
        port = PortRef(fabric="lab", device=f"leaf-su01-r{rail}", port=7, rail=rail,
                       node=node_name)
        return ControlInput(workflow_id=f"remediate/lab/{port.key}", port=port)

    assert (await acts.fence_node(inp(1))).changed
    assert (await acts.fence_node(inp(2))).changed
    assert not (await acts.fence_node(inp(2))).changed  # a retried activity
    taints = kube.nodes["node0001"]["spec"]["taints"]
    assert rail_taint(1) in taints and rail_taint(2) in taints
    assert (await acts.unfence_node(inp(1))).changed
    taints = kube.nodes["node0001"]["spec"]["taints"]
    assert rail_taint(1) not in taints and rail_taint(2) in taints
    with pytest.raises(ApplicationError) as info:
        await acts.fence_node(inp(3, "node9999"))
    assert info.value.non_retryable and info.value.type == "AdapterRejected"
