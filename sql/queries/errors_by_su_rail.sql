-- Where are the link errors? Physical-layer errors (symbol, recovery, receive, remote
-- physical, integrity, overrun, uncorrectable FEC) summed per scalable unit and rail over
-- the hours from {since} to {until} (rounded to whole hours: read from counter_hourly), as
-- a heatmap: one row per (su, rail) cell.
-- SU and rail come from device_location (filled by the writer from each topology snapshot:
-- leaf `leaf-su01-r3` -> SU 1 rail 3, a host HCA -> the leaf it is cabled to); devices the
-- topology has not placed fall back to the switch naming rule, else land in su/rail NULL.
-- Params: fabric, since, until.
SELECT coalesce(loc.su, toUInt16OrNull(extract(h.device, '(?:^|[-_.])su(\\d+)'))) AS su,
       coalesce(loc.rail, toUInt16OrNull(extract(h.device, '(?:^|[-_.])r(\\d+)(?:$|[-_.])'))) AS rail,
       sum(h.d_errors) AS errors,
       uniqExact(h.device, h.port) AS ports,
       uniqExactIf((h.device, h.port), h.d_errors > 0) AS ports_with_errors,
       round(sum(h.d_errors) / greatest(uniqExact(h.device, h.port), 1), 2) AS errors_per_port,
       sum(h.d_fec_corrected) AS fec_corrected,
       sum(h.d_link_downed) AS link_downed
FROM counter_hourly AS h
LEFT JOIN
(
    SELECT device, su, rail FROM device_location FINAL WHERE fabric = {fabric:String}
) AS loc ON loc.device = h.device
WHERE h.fabric = {fabric:String}
  AND h.hour >= toStartOfHour({since:DateTime64(3, 'UTC')})
  AND h.hour < {until:DateTime64(3, 'UTC')}
GROUP BY su, rail
ORDER BY su, rail
