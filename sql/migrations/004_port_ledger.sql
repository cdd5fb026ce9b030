-- 004: the current per-port ledger.
--
-- The current facts of a port come from two places kept by materialized views:
-- counter_last (003: the last sample, so trained width / speed, BER, optics as last
-- reported) and port_state, which holds per port aggregate states from port events,
-- runbook actions and detections. (Link facts are not aggregated here from every sample:
-- at 100k ports that view cost as much as the rest of the counter insert.) Every state is a
-- "latest by event time" (argMax) or a max, so a replayed row changes nothing and rows that
-- arrive out of order still land where their event time puts them. AggregatingMergeTree
-- keyed on the port: merges fold the states, readers finish them with -Merge (port_ledger).
CREATE TABLE IF NOT EXISTS port_state
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    port   UInt16,
    optic_serial   AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    link_state     AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    last_event_ts  SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    isolated       AggregateFunction(argMax, UInt8, DateTime64(3, 'UTC')),
    isolated_since SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    last_action_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    last_action    AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    last_detection_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    last_detection    AggregateFunction(argMax, String, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (fabric, device, port);

-- Link state and the time of its last change from traps / port events.
CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_events TO port_state AS
SELECT fabric, device, port,
       argMaxState(toString(state), ts) AS link_state,
       max(ts) AS last_event_ts
FROM port_events
GROUP BY fabric, device, port;

-- Isolation state from the runbook's actions: a done `isolate` isolates, a done `return`
-- (return to service) un-isolates; shadow-mode (dry_run) actions change nothing. An optic
-- serial in an action's `after` (swap-optic) becomes the port's serial.
CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_actions TO port_state AS
SELECT fabric, device, port,
       argMaxStateIf(toUInt8(step = 'isolate'), ts,
                     outcome = 'done' AND dry_run = 0 AND step IN ('isolate', 'return')) AS isolated,
       maxIf(ts, outcome = 'done' AND dry_run = 0 AND step = 'isolate') AS isolated_since,
       maxIf(ts, outcome = 'done' AND dry_run = 0) AS last_action_ts,
       argMaxStateIf(toString(step), ts, outcome = 'done' AND dry_run = 0) AS last_action,
       argMaxStateIf(JSONExtractString(ifNull(after, '{}'), 'optic_serial'), ts,
                     JSONExtractString(ifNull(after, '{}'), 'optic_serial') != '') AS optic_serial
FROM actions
GROUP BY fabric, device, port;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_detections TO port_state AS
SELECT fabric, device, port,
       max(ts) AS last_detection_ts,
       argMaxState(toString(detection), ts) AS last_detection
FROM detections
GROUP BY fabric, device, port;

-- The ledger an operator reads: one row per port with its current facts and its recent
-- rates. "errors per hour" is the physical-layer error rate over the last 24 h of sampled
-- time; "flaps per day" is the link downs of the last 24 h. The optic serial is the one
-- the collector last reported, else the one a swap-optic action recorded. Times that never
-- happened are NULL. now() is wall time: the ledger answers "as of now".
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
       ifNull(f.flaps_24h, 0) AS flaps_per_day
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
) AS f ON f.fabric = fabric AND f.device = device AND f.port = port;
