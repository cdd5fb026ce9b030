"""Fake ``/sys/class/infiniband`` trees built from the real sysfs fixture (a grep -r dump).

Real HCAs cannot run here; the files, names and values are the real ones from
``tests/fixtures/sysfs-infiniband/gpud-h100-mlx5_0-grep-dump.txt`` (an H100 node's
``mlx5_0``), repeated for as many HCAs as a test wants. Tests and benchmarks are not
packages: they load this file by path.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SYSFS_DUMP = FIXTURES / "sysfs-infiniband" / "gpud-h100-mlx5_0-grep-dump.txt"
ETHTOOL_S = FIXTURES / "ethtool" / "mlx5-lkml-xdp-regression-k5.15-nonzero-only.txt"


def dump_lines(text: str | None = None) -> list[tuple[str, str]]:
    """(path relative to the HCA, value) of every line of the dump."""
    text = SYSFS_DUMP.read_text() if text is None else text
    out = []
    for line in text.splitlines():
        path, _, value = line.partition(":")
        hca, _, rest = path.partition("/")
        if hca and rest:
            out.append((rest, value))
    return out


def build(sysfs: Path, hcas: int = 8, *, ethernet: set[int] | None = None) -> Path:
    """``sysfs/class/infiniband/mlx5_<k>/...`` for k < hcas; RoCE (Ethernet) for ``ethernet``.

    A RoCE HCA gets ``link_layer`` Ethernet and ``gid_attrs/ndevs/0`` naming ``eth<k>``.
    Returns the ``class/infiniband`` folder.
    """
    ib = sysfs / "class" / "infiniband"
    for k in range(hcas):
        for rel, value in dump_lines():
            if ethernet and k in ethernet and rel.endswith("link_layer"):
                value = "Ethernet"
            path = ib / f"mlx5_{k}" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value + "\n")
        if ethernet and k in ethernet:
            ndev = ib / f"mlx5_{k}" / "ports" / "1" / "gid_attrs" / "ndevs" / "0"
            ndev.parent.mkdir(parents=True, exist_ok=True)
            ndev.write_text(f"eth{k}\n")
    return ib
