-- 004: the current per-port ledger.
--
-- port_state holds, per port, aggregate states that four materialized views keep current
-- (from counter samples, port events, runbook actions and detections). Every state is a
-- "latest by event time" (argMax) or a max, so a replayed row changes nothing and rows that
-- arrive out of order still land where their event time puts them. AggregatingMergeTree
-- keyed on the port: merges fold the states, readers finish them with -Merge (port_ledger).
CREATE TABLE IF NOT EXISTS port_state
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    port   UInt16,
    last_sample_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    width          AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    speed          AggregateFunction(argMax, String, DateTime64(3, 'UTC')),
    raw_ber        AggregateFunction(argMax, Float64, DateTime64(3, 'UTC')),
    effective_ber  AggregateFunction(argMax, Float64, DateTime64(3, 'UTC')),
    -- argMax states cannot hold NULL: these say whether a BER was ever reported.
    raw_ber_ts       SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    effective_ber_ts SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
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

-- Link facts from counter samples: trained width/speed, BER, optic serial when reported.
CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_counters TO port_state AS
SELECT fabric, device, port,
       max(ts) AS last_sample_ts,
       argMaxStateIf(assumeNotNull(s_width), ts, s_width IS NOT NULL) AS width,
       argMaxStateIf(assumeNotNull(s_speed), ts, s_speed IS NOT NULL) AS speed,
       argMaxStateIf(assumeNotNull(s_raw_ber), ts, s_raw_ber IS NOT NULL) AS raw_ber,
       argMaxStateIf(assumeNotNull(s_eff_ber), ts, s_eff_ber IS NOT NULL) AS effective_ber,
       argMaxStateIf(assumeNotNull(s_serial), ts, s_serial IS NOT NULL) AS optic_serial,
       maxIf(ts, s_raw_ber IS NOT NULL) AS raw_ber_ts,
       maxIf(ts, s_eff_ber IS NOT NULL) AS effective_ber_ts
-- The inner SELECT renames the source columns: an alias that equals a source column's
-- name would otherwise be resolved inside the other aggregates.
FROM (SELECT fabric, device, port, ts, width AS s_width, speed AS s_speed,
             raw_ber AS s_raw_ber, effective_ber AS s_eff_ber, optic_serial AS s_serial
      FROM counter_samples)
GROUP BY fabric, device, port;

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
-- time; "flaps per day" is the link downs of the last 24 h. Times that never happened are
-- NULL. now() is wall time: the ledger answers "as of now".
CREATE VIEW IF NOT EXISTS port_ledger AS
SELECT st.fabric AS fabric, st.device AS device, st.port AS port,
       st.width AS width, st.speed AS speed, st.raw_ber AS raw_ber,
       st.effective_ber AS effective_ber, st.optic_serial AS optic_serial,
       st.link_state AS link_state, st.isolated AS isolated,
       st.isolated_since AS isolated_since,
       st.last_sample_ts AS last_sample_ts, st.last_detection AS last_detection,
       st.last_detection_ts AS last_detection_ts, st.last_action AS last_action,
       st.last_change AS last_change,
       e.errors_24h AS errors_24h, e.errors_per_hour AS errors_per_hour,
       f.flaps_24h AS flaps_per_day
FROM
(
    SELECT fabric, device, port,
           nullIf(argMaxMerge(width), '') AS width,
           nullIf(argMaxMerge(speed), '') AS speed,
           if(max(raw_ber_ts) > toDateTime64(0, 3, 'UTC'), argMaxMerge(raw_ber), NULL) AS raw_ber,
           if(max(effective_ber_ts) > toDateTime64(0, 3, 'UTC'), argMaxMerge(effective_ber), NULL) AS effective_ber,
           nullIf(argMaxMerge(optic_serial), '') AS optic_serial,
           nullIf(argMaxMerge(link_state), '') AS link_state,
           argMaxMerge(isolated) AS isolated,
           if(isolated = 1, max(isolated_since), NULL) AS isolated_since,
           nullIf(max(last_sample_ts), toDateTime64(0, 3, 'UTC')) AS last_sample_ts,
           nullIf(argMaxMerge(last_detection), '') AS last_detection,
           nullIf(max(last_detection_ts), toDateTime64(0, 3, 'UTC')) AS last_detection_ts,
           nullIf(argMaxMerge(last_action), '') AS last_action,
           nullIf(greatest(max(last_event_ts), max(last_action_ts)),
                  toDateTime64(0, 3, 'UTC')) AS last_change
    FROM port_state
    GROUP BY fabric, device, port
) AS st
LEFT JOIN
(
    SELECT fabric, device, port,
           sum(d_errors) AS errors_24h,
           sum(d_errors) * 3600000 / greatest(sum(covered_ms), 1) AS errors_per_hour
    FROM counter_hourly
    WHERE hour >= toStartOfHour(now('UTC')) - INTERVAL 23 HOUR
    GROUP BY fabric, device, port
) AS e ON e.fabric = st.fabric AND e.device = st.device AND e.port = st.port
LEFT JOIN
(
    SELECT fabric, device, port, uniqExactMerge(downs) AS flaps_24h
    FROM port_events_hourly
    WHERE hour >= toStartOfHour(now('UTC')) - INTERVAL 23 HOUR
    GROUP BY fabric, device, port
) AS f ON f.fabric = st.fabric AND f.device = st.device AND f.port = st.port;
