-- Everything the ledger knows about one port between {since} and {until}, in time order:
-- link events, counter hours with errors / resets / link downs (from counter_hourly, one
-- row per hour), detections, runbook actions (with workflow, actor, before/after) and
-- captured evidence. What an engineer reads before touching the cable.
-- Params: fabric, device, port, since, until.
SELECT ts, kind, what, detail
FROM
(
    SELECT ts, 'event' AS kind, toString(state) AS what,
           toJSONString(map('trap', toString(trap), 'phys_state', ifNull(phys_state, ''),
                            'reason', ifNull(reason, ''), 'source', toString(source))) AS detail
    FROM port_events FINAL
    WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
      AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    UNION ALL
    SELECT toDateTime64(hour, 3, 'UTC') AS ts, 'counters' AS kind,
           concat(toString(d_errors), ' errors in hour') AS what,
           toJSONString(map('errors', toString(d_errors), 'symbol_errors', toString(d_symbol_errors),
                            'link_downed', toString(d_link_downed), 'resets', toString(resets),
                            'fec_uncorrectable', toString(d_fec_uncorrectable),
                            'max_raw_ber', toString(max_raw_ber), 'samples', toString(samples))) AS detail
    FROM
    (
        SELECT hour, sum(d_errors) AS d_errors, sum(d_symbol_errors) AS d_symbol_errors,
               sum(d_link_downed) AS d_link_downed, sum(resets) AS resets,
               sum(d_fec_uncorrectable) AS d_fec_uncorrectable, max(max_raw_ber) AS max_raw_ber,
               sum(samples) AS samples
        FROM counter_hourly
        WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
          AND hour >= toStartOfHour({since:DateTime64(3, 'UTC')})
          AND hour < {until:DateTime64(3, 'UTC')}
        GROUP BY hour
    )
    WHERE d_errors > 0 OR d_link_downed > 0 OR resets > 0
    UNION ALL
    SELECT ts, 'detection' AS kind, toString(detection) AS what,
           toJSONString(map('severity', toString(severity), 'action', toString(action),
                            'episode', episode, 'evidence', evidence)) AS detail
    FROM detections FINAL
    WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
      AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    UNION ALL
    SELECT ts, 'action' AS kind, concat(toString(step), ': ', toString(outcome)) AS what,
           toJSONString(map('workflow_id', workflow_id, 'actor', toString(actor),
                            'before', ifNull(before, ''), 'after', ifNull(after, ''),
                            'note', ifNull(note, ''), 'dry_run', toString(dry_run))) AS detail
    FROM actions FINAL
    WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
      AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    UNION ALL
    SELECT ts, 'evidence' AS kind, toString(tool) AS what,
           toJSONString(map('workflow_id', workflow_id, 'exit_code', toString(exit_code),
                            'output_bytes', toString(length(output)))) AS detail
    FROM evidence FINAL
    WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
      AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
)
ORDER BY ts, kind
