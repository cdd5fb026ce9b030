"""BER by link type with hysteresis, and the packet drop rate: the counters detector's rules.

Pure logic; ``streams.counters.logic.CountersDetector`` keeps the per-port state and calls
these from its rarer paths. The thresholds are NVIDIA's field BER table
(``schemas.ber_table``) for the link's speed, FEC mode and media.

* ``BerRules.link(speed, fec, media)``: the link type's levels, and which of the three were
  assumed (the sample did not say, or said something the table does not know), cached. A
  FEC the table has no row for at that speed is judged by the strictest row of the speed;
  a speed it has no row for, as the policy's own link type.
* ``next_level``: the hysteresis. An episode opens above *error* and closes only below
  *normal*; outside an episode, above *warning* is a warning episode, closed below *normal*.
* Bits a link carried: its lane rate times its width over the window (what mlxlink divides
  its error counts by), so BER is errors over capacity, not over traffic.
"""

from __future__ import annotations

from typing import Literal

from schemas.ber_table import (
    Levels,
    LinkBer,
    TableError,
    default_table,
    fec_opcodes,
    lookup,
    media_group,
)
from schemas.policy import WIDTH_RANK, Policy

# Per-lane data rate in Gb/s by IB speed, for the bits a link carried.
LANE_GBPS: dict[str, float] = {"SDR": 2.0, "DDR": 4.0, "QDR": 8.0, "FDR10": 10.0,
                               "FDR": 13.64, "EDR": 25.0, "HDR": 50.0, "NDR": 100.0,
                               "XDR": 200.0}
# Names of the three metrics in conditions, evidence and the table.
METRIC_NAMES: dict[str, str] = {"pre_fec": "raw", "post_fec": "effective", "symbol": "symbol"}
_OFF = float("inf")

Level = Literal["error", "warning", "clear"]


def next_level(value: float, levels: Levels, error_open: bool, warning_open: bool) -> Level:
    """The metric's state after ``value``, given the episodes open before it."""
    if error_open:
        return "error" if value >= levels.normal else "clear"
    if value > levels.error:
        return "error"
    if warning_open:
        return "warning" if value >= levels.normal else "clear"
    if value > levels.warning:
        return "warning"
    return "clear"


def link_gbps(width: str | None, speed: str | None) -> float:
    """The link's data rate in Gb/s (4X NDR where a part is unknown)."""
    return LANE_GBPS.get(speed or "", 100.0) * WIDTH_RANK.get(width or "", 4)


class BerRules:
    """The policy's BER settings resolved once; link types resolved once each."""

    def __init__(self, policy: Policy) -> None:
        fh = policy.fabric_health
        ber = fh.ber
        self.asic = ber.asic
        self.fec = ber.fec
        self.media = ber.media
        self.speed = fh.degraded_link.expect_speed
        self.at_normal = ber.fire_at == "normal"
        self.window_ms = round(ber.window * 1000)
        self.action = ber.action
        self.warning_action = ber.warning_action
        self.drop_limit = fh.drop_rate.max_drop_rate
        self.drop_action = fh.drop_rate.action
        factors = list(ber.symbol_window_factors)
        self.symbol_factors = factors or [1.0]
        self._links: dict[tuple[str | None, str | None, str | None],
                          tuple[LinkBer, tuple[str, ...]]] = {}
        self._floors: dict[tuple[str | None, str | None, str | None], tuple[float, float]] = {}
        self.default, _ = self.link(None, None, None)

    def link(self, speed: str | None, fec: str | None, media: str | None
             ) -> tuple[LinkBer, tuple[str, ...]]:
        """The link type's thresholds and the parts of it that were assumed."""
        key = (speed, fec, media)
        hit = self._links.get(key)
        if hit is not None:
            return hit
        assumed: list[str] = []
        if speed is None:
            speed = self.speed
            assumed.append("speed")
        if fec is None or fec_opcodes(fec) is None:
            fec = self.fec
            assumed.append("fec")
        if media is None or media_group(media) is None:
            media = self.media
            assumed.append("media")
        try:
            found = lookup(speed, fec, media, self.asic)
        except TableError:
            strictest = _strictest(speed, media, self.asic)
            if strictest is not None:
                # the speed is in the table but not this FEC (or the FEC's rows disagree):
                # the strictest of that speed's rows, so an unknown FEC cannot loosen it
                found = strictest
                assumed = [*assumed, "fec"] if "fec" not in assumed else assumed
            else:
                # a speed the table has no row for: the policy's own link type
                found = self.fallback()
                assumed = ["speed", "fec", "media"]
        if self.at_normal:
            found = _at_normal(found)
        hit = (found, tuple(assumed))
        if len(self._links) < 4096:  # a handful of link types in any real fabric
            self._links[key] = hit
        return hit


    def fallback(self) -> LinkBer:
        """The policy's own link type, or — when its speed is one the table has no row for
        (an SDR lab, XDR) — the strictest row of any speed for its media, so a link type the
        table does not know is never judged more loosely than one it does."""
        try:
            return lookup(self.speed, self.fec, self.media, self.asic)
        except TableError:
            pass
        found = _strictest(self.speed, self.media, self.asic)
        if found is not None:
            return found
        rows = [r for r in (_strictest(speed, self.media, self.asic)
                            for speed in sorted({r.speed for r in default_table()
                                                 if r.asic == self.asic}))
                if r is not None]
        if not rows:
            raise TableError(f"no {self.asic} row for media {self.media!r}")
        return min(rows, key=lambda r: (r.pre_fec.error, r.post_fec.error, r.symbol.error))

    def gauge_floors(self, speed: str | None, fec: str | None, media: str | None
                     ) -> tuple[float, float]:
        """The lowest pre- and post-FEC BER that can open anything on this link type: below
        both, a gauge needs no closer look. Without a media, copper's and optics' lowest
        (the port's last media or the plan's may be either)."""
        key = (speed, fec, media)
        hit = self._floors.get(key)
        if hit is not None:
            return hit
        links = ([self.link(speed, fec, media)[0]] if media is not None else
                 [self.link(speed, fec, m)[0] for m in ("copper", "optic")])
        hit = (min(min(k.pre_fec.warning, k.pre_fec.error) for k in links),
               min(min(k.post_fec.warning, k.post_fec.error) for k in links))
        if len(self._floors) < 4096:
            self._floors[key] = hit
        return hit


def _strictest(speed: str, media: str, asic: str) -> LinkBer | None:
    """The lowest levels of every FEC mode's row at this speed and media, or None when the
    table has no row for the speed."""
    group = media_group(media) or frozenset()
    rows = tuple(r for r in default_table() if r.asic == asic and r.speed == speed.upper()
                 and r.media in group)
    if not rows:
        return None

    def low(levels: list[Levels]) -> Levels:
        return Levels(min(v.error for v in levels), min(v.warning for v in levels),
                      min(v.normal for v in levels))

    return LinkBer(asic=asic, speed=speed.upper(), fec="strictest", media=media,
                   pre_fec=low([r.pre_fec for r in rows]),
                   post_fec=low([r.post_fec for r in rows]),
                   symbol=low([r.symbol for r in rows]), rows=rows)


def _at_normal(link: LinkBer) -> LinkBer:
    """The link's levels with *normal* as the only level (the return-to-service soak)."""
    def only(levels: Levels) -> Levels:
        return Levels(levels.normal, _OFF, levels.normal)

    return LinkBer(asic=link.asic, speed=link.speed, fec=link.fec, media=link.media,
                   pre_fec=only(link.pre_fec), post_fec=only(link.post_fec),
                   symbol=only(link.symbol), rows=link.rows)


def link_evidence(link: LinkBer, assumed: tuple[str, ...]) -> dict[str, object]:
    """What a detection says of the link type it was judged as."""
    return {"asic": link.asic, "speed": link.speed, "fec": link.fec, "media": link.media,
            "fec_modes": sorted({r.fec_type for r in link.rows}),
            "assumed": list(assumed), "table": link.rows[0].version}


def drop_rate(errors: int | None, packets: int | None) -> float | None:
    """Errors (or discards) over the packets they are part of, or None without packets."""
    if errors is None or packets is None or errors + packets <= 0:
        return None
    return errors / (packets + errors)
