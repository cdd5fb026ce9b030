"""``fabricwatch audit``: the configuration posture audit of issue 13.

Exit status: 0 when no finding is at or above ``--fail-on`` (default warning), 1 when there
are, 2 when an input is not what its flag says (or cannot be read).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fabricwatch.audit import (
    AuditInputError,
    AuditRequest,
    Finding,
    K8sOptions,
    NcclOptions,
    at_or_above,
    findings_to_detections,
    render,
    run_audit,
)
from fabricwatch.audit.k8s import DEFAULT_INFRA_NAMESPACES
from schemas import Severity

if TYPE_CHECKING:
    from runtime.settings import Settings

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
_PATH = click.Path(exists=True, path_type=Path)
# The longest measured heavy sweep (sql/migrations/011_sm_sweeps.sql: one row per sweep,
# duration NULL where its start was not seen; max ignores those).
RESWEEP_SQL = ("SELECT max(duration_ms) / 1000 AS resweep_s FROM sm_sweeps FINAL "
               "WHERE fabric = {fabric:String} AND duration_ms IS NOT NULL")


def resweep_from_ledger(settings: Settings) -> float | None:
    """The fabric's longest measured re-sweep (seconds) from the ledger, or None.

    Optional by design: no ledger package, no ledger data, or no sweep table all mean None,
    and the NCCL timeout rule then reports that it could not check (NCCL010).
    """
    try:
        from ledger import open_ledger

        ledger = open_ledger(settings)
    except Exception:  # noqa: BLE001 - any ledger failure means "not available"
        return None
    try:
        rows = ledger.query(RESWEEP_SQL, {"fabric": settings.fabric})
        value = rows[0].get("resweep_s") if rows else None
        return float(value) if value is not None and float(value) > 0 else None
    except Exception:  # noqa: BLE001
        return None
    finally:
        ledger.close()


def _write_ledger(settings: Settings, findings: Sequence[Finding], ts: int) -> str:
    try:
        from ledger import open_ledger

        ledger = open_ledger(settings)
    except Exception as exc:  # noqa: BLE001 - report and keep the audit result
        return f"ledger not written: {type(exc).__name__}: {exc}"
    try:
        written = ledger.write(findings_to_detections(findings, fabric=settings.fabric, ts=ts))
        return f"ledger: {written} finding(s) written as detections"
    except Exception as exc:  # noqa: BLE001
        return f"ledger not written: {type(exc).__name__}: {exc}"
    finally:
        ledger.close()


@click.command("audit")
@click.option("--opensm", type=_FILE, help="opensm.conf to audit.")
@click.option("--partitions", type=_FILE, help="opensm partitions.conf to audit.")
@click.option("--k8s", "k8s_paths", type=_PATH, multiple=True,
              help="Kubernetes manifest file or folder (repeatable).")
@click.option("--nccl-env", type=_FILE, help="NCCL env file or pod spec to audit.")
@click.option("--roce", type=_FILE, help="mlnx_qos output or switch QoS YAML to audit.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif"]), default="text",
              show_default=True)
@click.option("--fail-on", type=click.Choice(["info", "warning", "critical", "never"]),
              default="warning", show_default=True,
              help="Exit 1 when a finding is at or above this severity.")
@click.option("--plan-expects-qos/--plan-without-qos", default=None,
              help="The plan uses InfiniBand QoS (SL/VL), or does not. Unsaid: unknown, and a "
                   "QoS that is off is reported as undecided.")
@click.option("--fat-tree/--not-fat-tree", default=None,
              help="The topology is a fat tree, or is not. Unsaid: unknown, and an unpinned "
                   "routing engine is reported.")
@click.option("--tenant-ipoib", is_flag=True,
              help="Tenants run IPoIB on their partitions (each needs ipoib and mtu).")
@click.option("--resweep-s", type=click.FloatRange(min=0, min_open=True),
              help="The fabric's measured re-sweep time in seconds (else read from the ledger "
                   "with --ledger).")
@click.option("--backend-if", multiple=True, default=("ib*",), show_default=True,
              help="Glob of backend (RDMA fabric) interface names (repeatable).")
@click.option("--backend-hca", multiple=True, help="A backend HCA name, e.g. mlx5_0 "
              "(repeatable); enables the NCCL_IB_HCA check.")
@click.option("--transport", type=click.Choice(["ib", "roce"]),
              help="The NCCL transport; default RoCE when --roce is given or RoCE variables "
                   "are set.")
@click.option("--lossless-priority", type=click.IntRange(0, 7), default=3, show_default=True,
              help="The lossless priority when no --roce input defines it.")
@click.option("--gpu-namespace", multiple=True, help="A GPU/RDMA workload namespace "
              "(repeatable); pods there are checked even without GPU/RDMA requests.")
@click.option("--infra-namespace", multiple=True,
              help="An infrastructure namespace exempt from the workload rules (repeatable; "
                   f"default: {', '.join(DEFAULT_INFRA_NAMESPACES)}).")
@click.option("--approved-rdma-namespace", multiple=True,
              help="A namespace approved for RDMA resources (repeatable); enables K8S006.")
@click.option("--ledger", "use_ledger", is_flag=True,
              help="Write findings to the ledger as detections, and read the re-sweep time "
                   "from it.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report to this file instead of stdout.")
def audit(opensm: Path | None, partitions: Path | None, k8s_paths: tuple[Path, ...],
          nccl_env: Path | None, roce: Path | None, fmt: str, fail_on: str,
          plan_expects_qos: bool | None, fat_tree: bool | None, tenant_ipoib: bool, resweep_s: float | None,
          backend_if: tuple[str, ...], backend_hca: tuple[str, ...], transport: str | None,
          lossless_priority: int, gpu_namespace: tuple[str, ...],
          infra_namespace: tuple[str, ...], approved_rdma_namespace: tuple[str, ...],
          use_ledger: bool, output: Path | None) -> None:
    """Audit fabric configuration posture: what is wrong, why it matters, the line to change.

    Exit 0 when nothing is at or above --fail-on, 1 when something is, 2 on bad input.
    """
    settings: Settings | None = None
    if use_ledger:
        from runtime.settings import load_settings

        settings = load_settings()
    resweep_source = "--resweep-s"
    if resweep_s is None and settings is not None and nccl_env is not None:
        resweep_s = resweep_from_ledger(settings)
        resweep_source = "measured, from the ledger"
    request = AuditRequest(
        opensm=opensm, partitions=partitions, k8s=k8s_paths, nccl_env=nccl_env, roce=roce,
        fat_tree=fat_tree, plan_expects_qos=plan_expects_qos, tenant_ipoib=tenant_ipoib,
        k8s_options=K8sOptions(
            gpu_namespaces=frozenset(gpu_namespace),
            infra_namespaces=frozenset(infra_namespace or DEFAULT_INFRA_NAMESPACES),
            approved_rdma_namespaces=frozenset(approved_rdma_namespace)),
        nccl_options=NcclOptions(
            backend_ifaces=backend_if, backend_hcas=backend_hca, transport=transport,
            resweep_s=resweep_s, resweep_source=resweep_source,
            lossless_priority=lossless_priority),
    )
    if request.empty:
        raise click.UsageError("give at least one of --opensm, --partitions, --k8s, "
                               "--nccl-env, --roce")
    try:
        findings = run_audit(request)
    except AuditInputError as exc:
        click.echo(f"fabricwatch audit: {exc}", err=True)
        sys.exit(2)
    report = render(findings, fmt)
    if output is not None:
        output.write_text(report, encoding="utf-8")
    else:
        click.echo(report, nl=False)
    if settings is not None:
        click.echo(_write_ledger(settings, findings, int(time.time() * 1000)), err=True)
    if fail_on != "never" and at_or_above(findings, Severity(fail_on)):
        sys.exit(1)


COMMANDS: list[click.Command] = [audit]
