"""Audit of Kubernetes manifests (YAML files or folders of them, multi-document) for RDMA pods.

RDMA bypasses NetworkPolicy and iptables, so what isolates tenants on the host is what a pod
may touch: workloads need only ``IPC_LOCK`` and the RDMA resource their device plugin hands
out. Documents are composed with the safe loader (no Python tags) and walked as YAML nodes so
every finding keeps the line it came from.

Which pods are checked: a pod that requests GPU or RDMA resources, or runs in a namespace given
as a GPU/RDMA namespace, unless its namespace is an infrastructure namespace (the network
operator, GPU operator and kube-system need privileges to install drivers). Image pinning is
checked everywhere, for the network operator, device plugin and OFED/DOCA driver images
(containers and the NicClusterPolicy resource).

Rules: K8S001-K8S008.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fabricwatch.audit.findings import Finding, finding
from fabricwatch.audit.inputs import AuditInputError, read_text
from schemas import Severity

DEFAULT_INFRA_NAMESPACES = ("nvidia-network-operator", "network-operator", "gpu-operator",
                            "nvidia-gpu-operator", "kube-system")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
RDMA_RESOURCE = re.compile(r"(^rdma/|rdma|^mellanox\.com/|/hca|hca_|^nvidia\.com/hostdev)", re.I)
GPU_RESOURCE = re.compile(r"^(nvidia\.com/gpu|amd\.com/gpu|nvidia\.com/mig-)", re.I)
# /dev/infiniband itself or a folder holding it (/dev, the host's root)
DEV_INFINIBAND = re.compile(r"^/+(?:dev/*(?:infiniband/*)?)?$")
UMAD_ISSM = re.compile(r"/dev/infiniband/(umad|issm)")
# Images of the network operator, RDMA/SR-IOV/GPU device plugins and the OFED/DOCA driver.
PINNED_COMPONENTS = re.compile(
    r"(network-operator|device-plugin|rdma-shared-dev-plugin|sriov-network-device-plugin|"
    r"ib-kubernetes|mofed|doca-driver|ofed-driver|/ofed)", re.I)
DANGEROUS_CAPS = {"SYS_ADMIN": Severity.CRITICAL, "ALL": Severity.CRITICAL,
                  "NET_ADMIN": Severity.WARNING}
MAX_NODES_SCANNED = 100_000


@dataclass(frozen=True)
class K8sOptions:
    gpu_namespaces: frozenset[str] = frozenset()
    infra_namespaces: frozenset[str] = frozenset(DEFAULT_INFRA_NAMESPACES)
    approved_rdma_namespaces: frozenset[str] = frozenset()


@dataclass
class K8sObject:
    path: str
    node: MappingNode
    kind: str
    name: str
    namespace: str
    findings: list[Finding] = field(default_factory=list)


def line_of(node: Node) -> int:
    return int(node.start_mark.line) + 1


def get(node: Node | None, key: str) -> Node | None:
    if not isinstance(node, MappingNode):
        return None
    found: Node | None = None
    for k, v in node.value:
        if isinstance(k, ScalarNode) and k.value == key:
            found = v  # the last duplicate wins, as in the API server's decoder
    return found


def get_path(node: Node | None, keys: Sequence[str]) -> Node | None:
    for key in keys:
        node = get(node, key)
    return node


def scalar(node: Node | None) -> str | None:
    if isinstance(node, ScalarNode):
        return str(node.value)
    return None


def is_true(node: Node | None) -> bool:
    value = scalar(node)
    return value is not None and value.lower() in ("true", "yes", "on", "y")


def items(node: Node | None) -> list[Node]:
    return list(node.value) if isinstance(node, SequenceNode) else []


def pairs(node: Node | None) -> list[tuple[str, Node]]:
    if not isinstance(node, MappingNode):
        return []
    return [(str(k.value), v) for k, v in node.value if isinstance(k, ScalarNode)]


def _scalars(node: Node) -> Iterator[ScalarNode]:
    """Every scalar under ``node``; shared (aliased) nodes are visited once."""
    seen: set[int] = set()
    stack = [node]
    while stack and len(seen) < MAX_NODES_SCANNED:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ScalarNode):
            yield current
        elif isinstance(current, SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, MappingNode):
            for k, v in current.value:
                stack.extend((k, v))


def compose_documents(text: str, path: str) -> list[Node]:
    """The YAML documents of a file as nodes (safe loader); bad YAML is an input error."""
    try:
        return [doc for doc in yaml.compose_all(text, Loader=yaml.SafeLoader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = int(mark.line) + 1 if mark is not None else None
        raise AuditInputError(f"not valid YAML: {exc.problem or exc}", path, line) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise AuditInputError(f"not valid YAML: {type(exc).__name__}", path) from None


def objects(node: Node, path: str) -> Iterator[K8sObject]:
    kind = scalar(get(node, "kind"))
    api = scalar(get(node, "apiVersion"))
    if not isinstance(node, MappingNode) or not kind or not api:
        return
    if kind.endswith("List"):
        for item in items(get(node, "items")):
            yield from objects(item, path)
        return
    meta = get(node, "metadata")
    yield K8sObject(path=path, node=node, kind=kind, name=scalar(get(meta, "name")) or "(unnamed)",
               namespace=scalar(get(meta, "namespace")) or "default")


def audit_manifest_text(text: str, path: str, options: K8sOptions, *,
                        strict: bool = True) -> list[Finding]:
    """Findings for one manifest file's text.

    With ``strict`` (a file named on the command line) a file without any Kubernetes object is
    an input error; inside a folder it is only reported (K8S008), so a Helm values file or a
    kustomize patch next to the manifests does not stop the audit.
    """
    out: list[Finding] = []
    count = 0
    for node in compose_documents(text, path):
        docs = list(objects(node, path))
        if not docs:
            out.append(finding(
                "K8S008", path, line_of(node),
                "This YAML document has no apiVersion and kind, so it is not a Kubernetes "
                "object and was not audited.",
                "Point --k8s at rendered manifests (e.g. `helm template` or `kustomize build` "
                "output)."))
            continue
        for doc in docs:
            count += 1
            out += _audit_object(doc, options)
    if count == 0:
        if strict:
            raise AuditInputError("no Kubernetes object (apiVersion + kind) found: this is not "
                                  "a Kubernetes manifest", path)
        return [f for f in out if f.rule == "K8S008"][:1]
    return out


def manifest_files(path: Path) -> list[Path]:
    """The manifest files of a path: the file itself, or every YAML/JSON file under a folder."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise AuditInputError("no such file or folder", str(path))
    found: list[Path] = []
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(root) / f for f in sorted(files)
                  if f.endswith(MANIFEST_SUFFIXES) and not f.startswith(".")]
    return found


def audit_k8s(paths: Sequence[Path], options: K8sOptions) -> list[Finding]:
    """Findings for manifest files and folders."""
    out: list[Finding] = []
    for path in paths:
        files = manifest_files(path)
        if path.is_dir() and not files:
            raise AuditInputError("folder holds no .yaml, .yml or .json manifest", str(path))
        in_folder = path.is_dir()
        audited = 0
        for file in files:
            found = audit_manifest_text(read_text(file), str(file), options,
                                        strict=not in_folder)
            audited += not (len(found) == 1 and found[0].rule == "K8S008")
            out += found
        if in_folder and audited == 0:
            raise AuditInputError("no Kubernetes object found in any manifest of this folder",
                                  str(path))
    return out


def _resource_names(container: Node) -> dict[str, int]:
    names: dict[str, int] = {}
    resources = get(container, "resources")
    for section in ("requests", "limits"):
        for name, value in pairs(get(resources, section)):
            names.setdefault(name, line_of(value))
    return names


def containers(spec: Node) -> list[Node]:
    out: list[Node] = []
    for key in CONTAINER_LISTS:
        out += [c for c in items(get(spec, key)) if isinstance(c, MappingNode)]
    return out


def _audit_object(doc: K8sObject, options: K8sOptions) -> list[Finding]:
    out: list[Finding] = []
    if doc.kind == "ConfigMap":
        out += _config_map(doc)
    if doc.kind == "NicClusterPolicy":
        out += _nic_cluster_policy(doc)
    template = POD_TEMPLATE_PATHS.get(doc.kind)
    if template is None:
        return out
    spec = get_path(doc.node, template)
    if not isinstance(spec, MappingNode):
        return out
    out += _pod(doc, spec, options)
    return out


def _who(doc: K8sObject) -> str:
    return f"{doc.kind} {doc.namespace}/{doc.name}"


def _pod(doc: K8sObject, spec: MappingNode, options: K8sOptions) -> list[Finding]:
    out: list[Finding] = []
    p = doc.path
    pod_containers = containers(spec)
    resources: dict[str, int] = {}
    for c in pod_containers:
        for name, line in _resource_names(c).items():
            resources.setdefault(name, line)
    rdma = {n: ln for n, ln in resources.items() if RDMA_RESOURCE.search(n)}
    gpu = {n: ln for n, ln in resources.items() if GPU_RESOURCE.search(n)}
    infra = doc.namespace in options.infra_namespaces
    workload = (bool(rdma or gpu) or doc.namespace in options.gpu_namespaces) and not infra
    who = _who(doc)

    for c in pod_containers:
        out += _image(doc, c)
    if rdma and options.approved_rdma_namespaces and \
            doc.namespace not in options.approved_rdma_namespaces:
        name, line = sorted(rdma.items())[0]
        out.append(finding(
            "K8S006", p, line,
            f"{who} requests the RDMA resource {name} in namespace {doc.namespace}, which is not "
            "approved for RDMA, so it shares the fabric outside the tenants' partitions plan.",
            "Run RDMA workloads only in approved namespaces, or add this namespace to the "
            "approved list (and a ResourceQuota of 0 for RDMA resources elsewhere).",
            namespace=doc.namespace, resource=name, object=who))
    if not infra:
        out += _host_paths(doc, spec, workload)
    if not workload:
        return out
    host_network = get(spec, "hostNetwork")
    if is_true(host_network) and host_network is not None:
        out.append(finding(
            "K8S002", p, line_of(host_network),
            f"{who} uses hostNetwork, so it sees the host's interfaces and every RDMA device "
            "in the host's network namespace, not just the one it was given.",
            "Remove hostNetwork and attach the RDMA network through the device plugin "
            "(and Multus) instead.", object=who))
    for c in pod_containers:
        cname = scalar(get(c, "name")) or "(unnamed)"
        sc = get(c, "securityContext")
        privileged = get(sc, "privileged")
        if is_true(privileged) and privileged is not None:
            out.append(finding(
                "K8S001", p, line_of(privileged),
                f"Container {cname} of {who} is privileged, so it can open every RDMA device, "
                "send management datagrams and reconfigure the HCA.",
                "Remove privileged: true; an RDMA workload needs only capabilities.add: "
                "[IPC_LOCK] and its RDMA resource.", object=who, container=cname))
        for cap in items(get_path(sc, ("capabilities", "add"))):
            name = (scalar(cap) or "").upper().removeprefix("CAP_")
            if name in DANGEROUS_CAPS:
                out.append(finding(
                    "K8S003", p, line_of(cap),
                    f"Container {cname} of {who} adds {name}; an RDMA workload needs only "
                    f"IPC_LOCK, and {name} lets it reconfigure host networking"
                    f"{' and devices' if name != 'NET_ADMIN' else ''}.",
                    f"Drop {name} from capabilities.add and keep only IPC_LOCK.",
                    severity=DANGEROUS_CAPS[name], object=who, container=cname,
                    capability=name))
    return out


def _host_paths(doc: K8sObject, spec: MappingNode, workload: bool) -> list[Finding]:
    out: list[Finding] = []
    who = _who(doc)
    for volume in items(get(spec, "volumes")):
        host_path = get_path(volume, ("hostPath", "path"))
        path = scalar(host_path)
        if path is None or host_path is None:
            continue
        if DEV_INFINIBAND.match(path) and workload:
            out.append(finding(
                "K8S004", doc.path, line_of(host_path),
                f"{who} mounts {path[:80]} from the host, which holds /dev/infiniband and "
                "hands it every HCA's "
                "uverbs, umad and issm device instead of the one it was allocated.",
                "Remove the hostPath volume; request the RDMA resource from the device plugin, "
                "which mounts only the allocated devices.", object=who, path=path))
        elif UMAD_ISSM.search(path):
            out.append(finding(
                "K8S005", doc.path, line_of(host_path),
                f"{who} mounts {path[:80]} from the host: umad lets a pod send management "
                "datagrams and issm lets it act as the subnet manager.",
                "Remove the hostPath volume; only the subnet manager host needs umad/issm.",
                object=who, path=path[:80]))
    return out


def _image(doc: K8sObject, container: Node) -> list[Finding]:
    image_node = get(container, "image")
    image = scalar(image_node)
    if image is None or image_node is None or not PINNED_COMPONENTS.search(image):
        return []
    if "@sha256:" in image:
        return []
    return [finding(
        "K8S007", doc.path, line_of(image_node),
        f"Image {image[:120]} of {_who(doc)} is referenced by tag, so a re-pushed tag silently "
        "changes the fabric driver or device plugin on every node.",
        "Pin the image by digest (image@sha256:...), e.g. from `crane digest` or the "
        "operator's release notes.", object=_who(doc), image=image[:120])]


def _nic_cluster_policy(doc: K8sObject) -> list[Finding]:
    """NicClusterPolicy names its images as repository + image + version per component."""
    out: list[Finding] = []
    spec = get(doc.node, "spec")
    components: list[tuple[str, Node]] = []
    for name, node in pairs(spec):
        if get(node, "image") is not None:
            components.append((name, node))
        else:
            components += [(f"{name}.{sub}", n) for sub, n in pairs(node)
                           if get(n, "image") is not None]
    for name, node in components:
        image = scalar(get(node, "image")) or ""
        version_node = get(node, "version")
        version = scalar(version_node) or ""
        if "@sha256:" in image or version.startswith("sha256:"):
            continue
        where = version_node or get(node, "image") or node
        out.append(finding(
            "K8S007", doc.path, line_of(where),
            f"NicClusterPolicy {doc.name} component {name} uses image {image[:60]} at version "
            f"{version[:40] or '(none)'}, a tag, so a re-pushed tag silently changes it on every "
            "node.",
            "Set version to the image digest (sha256:...) instead of a tag.",
            object=f"NicClusterPolicy {doc.name}", component=name))
    return out


def _config_map(doc: K8sObject) -> list[Finding]:
    out: list[Finding] = []
    data = get(doc.node, "data")
    if data is None:
        return out
    for scalar in _scalars(data):
        value = str(scalar.value)
        match = UMAD_ISSM.search(value)
        if match:
            line = line_of(scalar)
            if scalar.style in ("|", ">"):
                # A block scalar's text starts on the line after its indicator.
                line += 1 + value[:match.start()].count("\n")
            out.append(finding(
                "K8S005", doc.path, line,
                f"ConfigMap {doc.namespace}/{doc.name} hands out {match.group(0)}* devices "
                "(device plugin configuration): pods that get them can send management "
                "datagrams or act as the subnet manager.",
                "Remove umad/issm devices from the device plugin configuration; workloads "
                "need only uverbs and rdma_cm.",
                object=f"ConfigMap {doc.namespace}/{doc.name}", device=match.group(1)))
            break
    return out
