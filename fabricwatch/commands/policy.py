"""``fabricwatch policy check``: the effective policy, or one link type's BER thresholds.

``fabricwatch policy check [FILE]`` validates a policy file (``--policy FILE`` says the same)
and prints it with every default filled in; with ``--speed`` / ``--fec`` / ``--media`` (and
``--asic``) it prints the thresholds that link type is judged by instead. Exit 2 on a bad
file or an unknown link type, with the reason.
"""

from __future__ import annotations

from pathlib import Path

import click

from schemas.ber_table import LinkBer, TableError, lookup
from schemas.errors import ContractError
from schemas.policy import Policy


@click.group("policy")
def policy_group() -> None:
    """Check and show detection and automation policies."""


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(2)


@policy_group.command("check")
@click.argument("path", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Policy YAML (the same as FILE; default: the built-in one).")
@click.option("--speed", default=None, help="Link speed: NDR, HDR, EDR "
              "(default: degradedLink.expectSpeed).")
@click.option("--fec", default=None, help="FEC mode: PLR, KP4, LL, RS, NONE, an opcode or "
              "the tool's name (default: ber.fec).")
@click.option("--media", default=None, help="dac, acc, active, active_did, copper or optic "
              "(default: ber.media).")
@click.option("--asic", default=None, help="7nm (Quantum-2, ConnectX-7) or 16nm "
              "(default: ber.asic).")
def check(path: Path | None, policy_path: Path | None, speed: str | None, fec: str | None,
          media: str | None, asic: str | None) -> None:
    """Validate the policy and print it, or a link type's effective BER thresholds."""
    if path is not None and policy_path is not None and path != policy_path:
        _fail("give the policy file once (FILE or --policy)")
    source = path or policy_path
    try:
        policy = Policy.load(source)
    except ContractError as exc:
        where = f" at {exc.path}" if exc.path else ""
        _fail(f"{source}{where}: {exc.reason}")
    if speed is None and fec is None and media is None and asic is None:
        click.echo(policy.to_yaml(), nl=False)
        return
    fh = policy.fabric_health
    ber = fh.ber
    try:
        link = lookup(speed or fh.degraded_link.expect_speed, fec or ber.fec,
                      media or ber.media, asic or ber.asic)
    except TableError as exc:
        _fail(str(exc))
    click.echo(render_thresholds(policy, link), nl=False)


def render_thresholds(policy: Policy, link: LinkBer) -> str:
    """The thresholds one link type is judged by, as text."""
    fh = policy.fabric_health
    ber = fh.ber
    modes = "; ".join(sorted({r.fec_type for r in link.rows}))
    media = ", ".join(sorted({r.media for r in link.rows}))
    lines = [
        f"link type: {link.asic} {link.speed}, FEC {link.fec} ({modes}), media {link.media} "
        f"({media})",
        f"source: NVIDIA field BER table {link.rows[0].version} (UFM port-health plugin)",
        "",
        f"{'':14}{'error':>10}{'warning':>10}{'normal':>10}",
    ]
    for label, levels in (("pre-FEC BER", link.pre_fec), ("post-FEC BER", link.post_fec),
                          ("symbol BER", link.symbol)):
        lines.append(f"{label:14}{levels.error:>10.0e}{levels.warning:>10.0e}"
                     f"{levels.normal:>10.0e}")
    lines.append("")
    windows = fh.error_rates.symbol_error_windows
    for i, window in enumerate(windows):
        factor = ber.symbol_window_factors[i] if i < len(ber.symbol_window_factors) else 1.0
        lines.append(f"symbol errors over {window / 60:g} min: error above "
                     f"{link.symbol.error * factor:.0e}, warning above "
                     f"{link.symbol.warning * factor:.0e}, normal below "
                     f"{link.symbol.normal * factor:.0e}")
    lines += [
        f"pre-/post-FEC BER over {ber.window:g} s windows of the FEC counters (the tool's "
        f"since-clear BER only without them)",
        f"above error: ber ({ber.action}), open until below normal; above warning: "
        f"ber_warning ({ber.warning_action})",
        f"packet drop rate above {fh.drop_rate.max_drop_rate:.0e}: drop_rate "
        f"({fh.drop_rate.action})",
    ]
    if ber.fire_at == "normal":
        lines.append("fireAt normal: every metric judged at its normal level alone")
    return "\n".join(lines) + "\n"


COMMANDS: list[click.Command] = [policy_group]
