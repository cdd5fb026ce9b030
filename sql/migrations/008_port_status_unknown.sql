-- 008: silence is a state — a port that stopped reporting is `unknown`, never healthy.
--
-- The stream detectors publish a `stale` detection when a device (port 0, evidence scope
-- "device") or a port (scope "port") stops reporting while the rest of the fabric goes on,
-- and a `stale_end` with the same episode when it reports again (streams/stale/logic.py).
-- `stale_open` lists the episodes still open; `port_ledger` gains `stale_since` (when the
-- oldest open episode of the port or its device began to be seen) and `status`:
-- 'unknown' while one is open (whatever else is known of the port), else 'isolated',
-- 'down' (link state from port events) or 'ok'. A device-wide stale marker is not a fact of
-- port 0, so the detections view that fills port_state skips it (no phantom port 0 row).
CREATE VIEW IF NOT EXISTS stale_open AS
SELECT fabric, device, port, episode,
       anyIf(JSONExtractString(evidence, 'scope'), detection = 'stale') AS scope,
       minIf(ts, detection = 'stale') AS since  -- when the silence was first seen
FROM detections FINAL
WHERE detection IN ('stale', 'stale_end')
GROUP BY fabric, device, port, episode
HAVING countIf(detection = 'stale') > 0 AND countIf(detection = 'stale_end') = 0;

DROP VIEW IF EXISTS mv_port_state_detections;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_detections TO port_state AS
SELECT fabric, device, port,
       max(ts) AS last_detection_ts,
       argMaxState(toString(detection), ts) AS last_detection
FROM detections
WHERE NOT (detection IN ('stale', 'stale_end') AND JSONExtractString(evidence, 'scope') = 'device')
GROUP BY fabric, device, port;

DROP VIEW IF EXISTS port_ledger;

CREATE VIEW IF NOT EXISTS port_ledger AS
SELECT if(c.port_known, c.fabric, st.fabric) AS fabric,
       if(c.port_known, c.device, st.device) AS device,
       if(c.port_known, c.port, st.port) AS port,
       c.width AS width, c.speed AS speed, c.raw_ber AS raw_ber,
       c.effective_ber AS effective_ber,
       coalesce(c.optic_serial, st.optic_serial) AS optic_serial,
       st.link_state AS link_state, ifNull(st.isolated, 0) AS isolated,
       st.isolated_since AS isolated_since,
       if(c.port_known = 1, c.last_sample_ts, NULL) AS last_sample_ts,
       st.last_detection AS last_detection,
       st.last_detection_ts AS last_detection_ts, st.last_action AS last_action,
       st.last_change AS last_change,
       ifNull(e.errors_24h, 0) AS errors_24h, e.errors_per_hour AS errors_per_hour,
       ifNull(f.flaps_24h, 0) AS flaps_per_day,
       multiIf(sp.open = 1 AND sd.open = 1, least(sp.since, sd.since),
               sp.open = 1, sp.since, sd.open = 1, sd.since, NULL) AS stale_since,
       multiIf(stale_since IS NOT NULL, 'unknown',
               isolated = 1, 'isolated',
               link_state = 'down', 'down',
               'ok') AS status
FROM
(
    SELECT fabric, device, port, ts AS last_sample_ts, width, speed, raw_ber, effective_ber,
           optic_serial, 1 AS port_known
    FROM counter_last FINAL
) AS c
FULL OUTER JOIN
(
    SELECT fabric, device, port,
           nullIf(argMaxMerge(optic_serial), '') AS optic_serial,
           nullIf(argMaxMerge(link_state), '') AS link_state,
           argMaxMerge(isolated) AS isolated,
           if(isolated = 1, max(isolated_since), NULL) AS isolated_since,
           nullIf(argMaxMerge(last_detection), '') AS last_detection,
           nullIf(max(last_detection_ts), toDateTime64(0, 3, 'UTC')) AS last_detection_ts,
           nullIf(argMaxMerge(last_action), '') AS last_action,
           nullIf(greatest(max(last_event_ts), max(last_action_ts)),
                  toDateTime64(0, 3, 'UTC')) AS last_change
    FROM port_state
    GROUP BY fabric, device, port
) AS st ON st.fabric = c.fabric AND st.device = c.device AND st.port = c.port
LEFT JOIN
(
    SELECT fabric, device, port,
           sum(d_errors) AS errors_24h,
           sum(d_errors) * 3600000 / greatest(sum(covered_ms), 1) AS errors_per_hour
    FROM counter_hourly
    WHERE hour >= toStartOfHour(now('UTC')) - INTERVAL 23 HOUR
    GROUP BY fabric, device, port
) AS e ON e.fabric = fabric AND e.device = device AND e.port = port
LEFT JOIN
(
    SELECT fabric, device, port, uniqExactMerge(downs) AS flaps_24h
    FROM port_events_hourly
    WHERE hour >= toStartOfHour(now('UTC')) - INTERVAL 23 HOUR
    GROUP BY fabric, device, port
) AS f ON f.fabric = fabric AND f.device = device AND f.port = port
LEFT JOIN
(
    SELECT fabric, device, port, min(since) AS since, toUInt8(1) AS open FROM stale_open
    WHERE scope = 'port' GROUP BY fabric, device, port
) AS sp ON sp.fabric = fabric AND sp.device = device AND sp.port = port
LEFT JOIN
(
    SELECT fabric, device, min(since) AS since, toUInt8(1) AS open FROM stale_open
    WHERE scope = 'device' GROUP BY fabric, device
) AS sd ON sd.fabric = fabric AND sd.device = device;
