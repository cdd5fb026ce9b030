-- 003: derived tables kept current by materialized views, and hourly rollups.
--
-- Replays: counter_samples never receives a (port, ts) at or before the port's last stored
-- sample (mv_counter_deltas in 005 drops it), so the sums in counter_hourly see every
-- sample once. Event rollups count distinct event ids (uniqExact state), which a
-- replayed event cannot change. The "last value" tables keep argMax / max states or a
-- ReplacingMergeTree version, which a replay of the same row leaves as they were.

-- The last sample of every port: the previous value mv_counter_deltas (005) takes the
-- deltas of a port's next sample against (a 100k-row read instead of scanning raw
-- history), and the port's current link facts for port_ledger (trained width and speed,
-- BER, optics as last reported). Version = sample time, so a late older sample never
-- replaces a newer one.
CREATE TABLE IF NOT EXISTS counter_last
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    port   UInt16,
    ts     DateTime64(3, 'UTC'),
    symbol_errors               Nullable(UInt64),
    link_error_recovery         Nullable(UInt64),
    link_downed                 Nullable(UInt64),
    rcv_errors                  Nullable(UInt64),
    rcv_remote_phys_errors      Nullable(UInt64),
    xmit_discards               Nullable(UInt64),
    xmit_wait                   Nullable(UInt64),
    local_link_integrity_errors Nullable(UInt64),
    excessive_buffer_overrun    Nullable(UInt64),
    fec_corrected               Nullable(UInt64),
    fec_uncorrectable           Nullable(UInt64),
    pfc_pause_rx                Nullable(UInt64),
    pfc_pause_tx                Nullable(UInt64),
    ecn_marked                  Nullable(UInt64),
    cnp_sent                    Nullable(UInt64),
    cnp_handled                 Nullable(UInt64),
    out_of_sequence             Nullable(UInt64),
    local_ack_timeout_err       Nullable(UInt64),
    rx_discards_phy             Nullable(UInt64),
    raw_ber       Nullable(Float64),
    effective_ber Nullable(Float64),
    module_temp_c Nullable(Float32),
    rx_power_dbm  Nullable(Float32),
    width         LowCardinality(Nullable(String)),
    speed         LowCardinality(Nullable(String)),
    optic_serial  Nullable(String)
)
ENGINE = ReplacingMergeTree(ts)
ORDER BY (fabric, device, port);

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_last TO counter_last AS
SELECT fabric, device, port, ts, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy,
       raw_ber, effective_ber, module_temp_c, rx_power_dbm, width, speed, optic_serial
FROM counter_samples;

-- Per port and clock hour (event time): the sum of each counter's deltas, how many samples
-- and how much sampled time they cover (rates per hour = sum * 3600000 / covered_ms, which
-- stays right when an hour is only partly sampled), resets, and the worst BER / optics seen.
-- AggregatingMergeTree with SimpleAggregateFunction columns: merges add the sums up.
-- Partition by month; kept for the full retention (one row per port-hour is ~60x smaller
-- than the raw samples at a 60 s interval).
CREATE TABLE IF NOT EXISTS counter_hourly
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    port   UInt16,
    hour   DateTime('UTC'),
    samples    SimpleAggregateFunction(sum, UInt64),
    covered_ms SimpleAggregateFunction(sum, UInt64),
    resets     SimpleAggregateFunction(sum, UInt64),
    d_errors   SimpleAggregateFunction(sum, UInt64),
    d_symbol_errors               SimpleAggregateFunction(sum, UInt64),
    d_link_error_recovery         SimpleAggregateFunction(sum, UInt64),
    d_link_downed                 SimpleAggregateFunction(sum, UInt64),
    d_rcv_errors                  SimpleAggregateFunction(sum, UInt64),
    d_rcv_remote_phys_errors      SimpleAggregateFunction(sum, UInt64),
    d_xmit_discards               SimpleAggregateFunction(sum, UInt64),
    d_xmit_wait                   SimpleAggregateFunction(sum, UInt64),
    d_local_link_integrity_errors SimpleAggregateFunction(sum, UInt64),
    d_excessive_buffer_overrun    SimpleAggregateFunction(sum, UInt64),
    d_fec_corrected               SimpleAggregateFunction(sum, UInt64),
    d_fec_uncorrectable           SimpleAggregateFunction(sum, UInt64),
    d_pfc_pause_rx                SimpleAggregateFunction(sum, UInt64),
    d_pfc_pause_tx                SimpleAggregateFunction(sum, UInt64),
    d_ecn_marked                  SimpleAggregateFunction(sum, UInt64),
    d_cnp_sent                    SimpleAggregateFunction(sum, UInt64),
    d_cnp_handled                 SimpleAggregateFunction(sum, UInt64),
    d_out_of_sequence             SimpleAggregateFunction(sum, UInt64),
    d_local_ack_timeout_err       SimpleAggregateFunction(sum, UInt64),
    d_rx_discards_phy             SimpleAggregateFunction(sum, UInt64),
    max_raw_ber       SimpleAggregateFunction(max, Nullable(Float64)),
    max_effective_ber SimpleAggregateFunction(max, Nullable(Float64)),
    max_module_temp_c SimpleAggregateFunction(max, Nullable(Float32)),
    min_rx_power_dbm  SimpleAggregateFunction(min, Nullable(Float32))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (fabric, device, port, hour)
TTL hour + INTERVAL ${retention_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_hourly TO counter_hourly AS
SELECT fabric, device, port,
       toStartOfHour(toDateTime(ts, 'UTC')) AS hour,
       count() AS samples,
       sum(interval_ms) AS covered_ms,
       countIf(reset_mask != 0) AS resets,
       sum(d_errors) AS d_errors,
       sum(d_symbol_errors) AS d_symbol_errors,
       sum(d_link_error_recovery) AS d_link_error_recovery,
       sum(d_link_downed) AS d_link_downed,
       sum(d_rcv_errors) AS d_rcv_errors,
       sum(d_rcv_remote_phys_errors) AS d_rcv_remote_phys_errors,
       sum(d_xmit_discards) AS d_xmit_discards,
       sum(d_xmit_wait) AS d_xmit_wait,
       sum(d_local_link_integrity_errors) AS d_local_link_integrity_errors,
       sum(d_excessive_buffer_overrun) AS d_excessive_buffer_overrun,
       sum(d_fec_corrected) AS d_fec_corrected,
       sum(d_fec_uncorrectable) AS d_fec_uncorrectable,
       sum(d_pfc_pause_rx) AS d_pfc_pause_rx,
       sum(d_pfc_pause_tx) AS d_pfc_pause_tx,
       sum(d_ecn_marked) AS d_ecn_marked,
       sum(d_cnp_sent) AS d_cnp_sent,
       sum(d_cnp_handled) AS d_cnp_handled,
       sum(d_out_of_sequence) AS d_out_of_sequence,
       sum(d_local_ack_timeout_err) AS d_local_ack_timeout_err,
       sum(d_rx_discards_phy) AS d_rx_discards_phy,
       max(raw_ber) AS max_raw_ber,
       max(effective_ber) AS max_effective_ber,
       max(module_temp_c) AS max_module_temp_c,
       min(rx_power_dbm) AS min_rx_power_dbm
FROM counter_samples
GROUP BY fabric, device, port, hour;

-- Link downs / ups per port and hour as sets of event ids: a replayed event is the same
-- id, so the count cannot grow. Flaps per day = downs over 24 hours.
CREATE TABLE IF NOT EXISTS port_events_hourly
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    port   UInt16,
    hour   DateTime('UTC'),
    downs  AggregateFunction(uniqExact, String),
    ups    AggregateFunction(uniqExact, String)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (fabric, device, port, hour)
TTL hour + INTERVAL ${retention_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_events_hourly TO port_events_hourly AS
SELECT fabric, device, port,
       toStartOfHour(toDateTime(ts, 'UTC')) AS hour,
       uniqExactStateIf(id, state = 'down') AS downs,
       uniqExactStateIf(id, state = 'up') AS ups
FROM port_events
GROUP BY fabric, device, port, hour;

-- Detections per fabric, hour, kind and severity (distinct ids, distinct ports, distinct
-- episodes): the fleet view of what fired.
CREATE TABLE IF NOT EXISTS detections_hourly
(
    fabric    LowCardinality(String),
    hour      DateTime('UTC'),
    detection LowCardinality(String),
    severity  LowCardinality(String),
    detections AggregateFunction(uniqExact, String),
    episodes   AggregateFunction(uniqExact, String),
    ports      AggregateFunction(uniqExact, String, UInt16)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (fabric, hour, detection, severity)
TTL hour + INTERVAL ${retention_days} DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_detections_hourly TO detections_hourly AS
SELECT fabric, toStartOfHour(toDateTime(ts, 'UTC')) AS hour, detection, severity,
       uniqExactState(id) AS detections,
       uniqExactState(episode) AS episodes,
       uniqExactState(device, port) AS ports
FROM detections
GROUP BY fabric, hour, detection, severity;
