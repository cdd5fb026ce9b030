-- 012: counter samples late or out of order, several writers, and the later contract counters.
--
-- Order: the ingest (ledger.ingest) holds a counter sample back in Kafka, uncommitted, until
-- ledger.counterLatenessS (30 s) have passed since its ts, and writes what it releases in
-- event-time order (ledger.base.sample_generations: one sample per port per insert, oldest
-- first). So a sample that arrives at most that late, or out of order within it, takes its
-- place in the port's chain: its delta is against the sample before it in event time, and
-- the next one's against it. A sample at or before the port's last stored one (a replay,
-- or a sample later than the bound) still never reaches counter_samples
-- (mv_counter_samples), so counter_samples and counter_hourly see each (port, ts) once.
--
-- A sample later than the bound (older than the port's last stored sample when it reaches
-- the engine) is not lost: mv_counter_late keeps it in counter_late with the port's last ts
-- at the time, and the view counter_late_samples lists those never stored in
-- counter_samples (a replay of a stored sample lands in counter_late too; the view hides
-- it). Its interval's counts are in the next stored sample's delta: the port's totals stay
-- right, only which interval (and hour) they fall in is coarser.
--
-- Several writers: the ingest is one consumer group and counters are keyed by device, so
-- each device's samples come from one partition, hence one writer at a time (a rebalance
-- waits for the batch in flight and its commit: ledger.ingest). The deltas read the
-- previous value from counter_last, not from a writer's memory, so the writer that takes a
-- partition over carries on the same chain. On a cluster counter_last_local is per shard and
-- a device's rows stay on one shard (ledger.cluster).
--
-- Later counters: the PMA data and packet counters (4-octet words / packets) and the PHY's
-- link-down counter join the raw columns, the deltas (reset bits 19..23, after
-- COUNTER_FIELDS' 0..18: the bit of every earlier counter is unchanged) and the hourly sums.
-- d_errors is unchanged: none of them is a link error count.

ALTER TABLE counter_ingest ADD COLUMN IF NOT EXISTS port_xmit_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_xmit_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS phy_link_down Nullable(UInt64);

ALTER TABLE counter_last ADD COLUMN IF NOT EXISTS port_xmit_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_xmit_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS phy_link_down Nullable(UInt64);

ALTER TABLE counter_samples ADD COLUMN IF NOT EXISTS port_xmit_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_data Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_xmit_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS port_rcv_pkts Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS phy_link_down Nullable(UInt64);

ALTER TABLE counter_samples ADD COLUMN IF NOT EXISTS d_port_xmit_data UInt64,
    ADD COLUMN IF NOT EXISTS d_port_rcv_data UInt64,
    ADD COLUMN IF NOT EXISTS d_port_xmit_pkts UInt64,
    ADD COLUMN IF NOT EXISTS d_port_rcv_pkts UInt64,
    ADD COLUMN IF NOT EXISTS d_phy_link_down UInt64;

ALTER TABLE counter_hourly ADD COLUMN IF NOT EXISTS d_port_xmit_data SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS d_port_rcv_data SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS d_port_xmit_pkts SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS d_port_rcv_pkts SimpleAggregateFunction(sum, UInt64),
    ADD COLUMN IF NOT EXISTS d_phy_link_down SimpleAggregateFunction(sum, UInt64);

-- Each inserted block is joined with counter_last once: the rows with their deltas and the
-- port's last stored ts go to counter_delta_stage (engine Null: it stores nothing), from
-- which one view keeps the new samples (counter_samples) and another the late ones
-- (counter_late). A sample at the port's last ts is a replay and goes to neither.
CREATE TABLE IF NOT EXISTS counter_delta_stage
(
    id          String,
    ts          DateTime64(3, 'UTC'),
    last_ts     DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    device      LowCardinality(String),
    port        UInt16,
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
    port_xmit_data              Nullable(UInt64),
    port_rcv_data               Nullable(UInt64),
    port_xmit_pkts              Nullable(UInt64),
    port_rcv_pkts               Nullable(UInt64),
    phy_link_down               Nullable(UInt64),
    raw_ber       Nullable(Float64),
    effective_ber Nullable(Float64),
    module_temp_c Nullable(Float32),
    rx_power_dbm  Nullable(Float32),
    width         LowCardinality(Nullable(String)),
    speed         LowCardinality(Nullable(String)),
    optic_serial  Nullable(String),
    interval_ms   UInt32,
    reset_mask    UInt32,
    d_symbol_errors               UInt64,
    d_link_error_recovery         UInt64,
    d_link_downed                 UInt64,
    d_rcv_errors                  UInt64,
    d_rcv_remote_phys_errors      UInt64,
    d_xmit_discards               UInt64,
    d_xmit_wait                   UInt64,
    d_local_link_integrity_errors UInt64,
    d_excessive_buffer_overrun    UInt64,
    d_fec_corrected               UInt64,
    d_fec_uncorrectable           UInt64,
    d_pfc_pause_rx                UInt64,
    d_pfc_pause_tx                UInt64,
    d_ecn_marked                  UInt64,
    d_cnp_sent                    UInt64,
    d_cnp_handled                 UInt64,
    d_out_of_sequence             UInt64,
    d_local_ack_timeout_err       UInt64,
    d_rx_discards_phy             UInt64,
    d_port_xmit_data              UInt64,
    d_port_rcv_data               UInt64,
    d_port_xmit_pkts              UInt64,
    d_port_rcv_pkts               UInt64,
    d_phy_link_down               UInt64
)
ENGINE = Null;

DROP VIEW IF EXISTS mv_counter_deltas;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_deltas TO counter_delta_stage AS
SELECT b.id AS id, b.ts AS ts, l.ts AS last_ts, b.fabric AS fabric, b.source AS source,
       b.device AS device, b.port AS port,
       b.symbol_errors AS symbol_errors,
       b.link_error_recovery AS link_error_recovery,
       b.link_downed AS link_downed,
       b.rcv_errors AS rcv_errors,
       b.rcv_remote_phys_errors AS rcv_remote_phys_errors,
       b.xmit_discards AS xmit_discards,
       b.xmit_wait AS xmit_wait,
       b.local_link_integrity_errors AS local_link_integrity_errors,
       b.excessive_buffer_overrun AS excessive_buffer_overrun,
       b.fec_corrected AS fec_corrected,
       b.fec_uncorrectable AS fec_uncorrectable,
       b.pfc_pause_rx AS pfc_pause_rx,
       b.pfc_pause_tx AS pfc_pause_tx,
       b.ecn_marked AS ecn_marked,
       b.cnp_sent AS cnp_sent,
       b.cnp_handled AS cnp_handled,
       b.out_of_sequence AS out_of_sequence,
       b.local_ack_timeout_err AS local_ack_timeout_err,
       b.rx_discards_phy AS rx_discards_phy,
       b.port_xmit_data AS port_xmit_data,
       b.port_rcv_data AS port_rcv_data,
       b.port_xmit_pkts AS port_xmit_pkts,
       b.port_rcv_pkts AS port_rcv_pkts,
       b.phy_link_down AS phy_link_down,
       b.raw_ber AS raw_ber,
       b.effective_ber AS effective_ber,
       b.module_temp_c AS module_temp_c,
       b.rx_power_dbm AS rx_power_dbm,
       b.width AS width,
       b.speed AS speed,
       b.optic_serial AS optic_serial,
       toUInt32(if(l.ts = toDateTime64(0, 3, 'UTC'), 0,
                   least(dateDiff('millisecond', l.ts, b.ts), 4294967295))) AS interval_ms,
       toUInt32(ifNull(if(b.symbol_errors < l.symbol_errors, 1, 0)
               + if(b.link_error_recovery < l.link_error_recovery, 2, 0)
               + if(b.link_downed < l.link_downed, 4, 0)
               + if(b.rcv_errors < l.rcv_errors, 8, 0)
               + if(b.rcv_remote_phys_errors < l.rcv_remote_phys_errors, 16, 0)
               + if(b.xmit_discards < l.xmit_discards, 32, 0)
               + if(b.xmit_wait < l.xmit_wait, 64, 0)
               + if(b.local_link_integrity_errors < l.local_link_integrity_errors, 128, 0)
               + if(b.excessive_buffer_overrun < l.excessive_buffer_overrun, 256, 0)
               + if(b.fec_corrected < l.fec_corrected, 512, 0)
               + if(b.fec_uncorrectable < l.fec_uncorrectable, 1024, 0)
               + if(b.pfc_pause_rx < l.pfc_pause_rx, 2048, 0)
               + if(b.pfc_pause_tx < l.pfc_pause_tx, 4096, 0)
               + if(b.ecn_marked < l.ecn_marked, 8192, 0)
               + if(b.cnp_sent < l.cnp_sent, 16384, 0)
               + if(b.cnp_handled < l.cnp_handled, 32768, 0)
               + if(b.out_of_sequence < l.out_of_sequence, 65536, 0)
               + if(b.local_ack_timeout_err < l.local_ack_timeout_err, 131072, 0)
               + if(b.rx_discards_phy < l.rx_discards_phy, 262144, 0)
               + if(b.port_xmit_data < l.port_xmit_data, 524288, 0)
               + if(b.port_rcv_data < l.port_rcv_data, 1048576, 0)
               + if(b.port_xmit_pkts < l.port_xmit_pkts, 2097152, 0)
               + if(b.port_rcv_pkts < l.port_rcv_pkts, 4194304, 0)
               + if(b.phy_link_down < l.phy_link_down, 8388608, 0), 0)) AS reset_mask,
       if(isNull(b.symbol_errors) OR isNull(l.symbol_errors), 0, if(b.symbol_errors >= l.symbol_errors, b.symbol_errors - l.symbol_errors, b.symbol_errors)) AS d_symbol_errors,
       if(isNull(b.link_error_recovery) OR isNull(l.link_error_recovery), 0, if(b.link_error_recovery >= l.link_error_recovery, b.link_error_recovery - l.link_error_recovery, b.link_error_recovery)) AS d_link_error_recovery,
       if(isNull(b.link_downed) OR isNull(l.link_downed), 0, if(b.link_downed >= l.link_downed, b.link_downed - l.link_downed, b.link_downed)) AS d_link_downed,
       if(isNull(b.rcv_errors) OR isNull(l.rcv_errors), 0, if(b.rcv_errors >= l.rcv_errors, b.rcv_errors - l.rcv_errors, b.rcv_errors)) AS d_rcv_errors,
       if(isNull(b.rcv_remote_phys_errors) OR isNull(l.rcv_remote_phys_errors), 0, if(b.rcv_remote_phys_errors >= l.rcv_remote_phys_errors, b.rcv_remote_phys_errors - l.rcv_remote_phys_errors, b.rcv_remote_phys_errors)) AS d_rcv_remote_phys_errors,
       if(isNull(b.xmit_discards) OR isNull(l.xmit_discards), 0, if(b.xmit_discards >= l.xmit_discards, b.xmit_discards - l.xmit_discards, b.xmit_discards)) AS d_xmit_discards,
       if(isNull(b.xmit_wait) OR isNull(l.xmit_wait), 0, if(b.xmit_wait >= l.xmit_wait, b.xmit_wait - l.xmit_wait, b.xmit_wait)) AS d_xmit_wait,
       if(isNull(b.local_link_integrity_errors) OR isNull(l.local_link_integrity_errors), 0, if(b.local_link_integrity_errors >= l.local_link_integrity_errors, b.local_link_integrity_errors - l.local_link_integrity_errors, b.local_link_integrity_errors)) AS d_local_link_integrity_errors,
       if(isNull(b.excessive_buffer_overrun) OR isNull(l.excessive_buffer_overrun), 0, if(b.excessive_buffer_overrun >= l.excessive_buffer_overrun, b.excessive_buffer_overrun - l.excessive_buffer_overrun, b.excessive_buffer_overrun)) AS d_excessive_buffer_overrun,
       if(isNull(b.fec_corrected) OR isNull(l.fec_corrected), 0, if(b.fec_corrected >= l.fec_corrected, b.fec_corrected - l.fec_corrected, b.fec_corrected)) AS d_fec_corrected,
       if(isNull(b.fec_uncorrectable) OR isNull(l.fec_uncorrectable), 0, if(b.fec_uncorrectable >= l.fec_uncorrectable, b.fec_uncorrectable - l.fec_uncorrectable, b.fec_uncorrectable)) AS d_fec_uncorrectable,
       if(isNull(b.pfc_pause_rx) OR isNull(l.pfc_pause_rx), 0, if(b.pfc_pause_rx >= l.pfc_pause_rx, b.pfc_pause_rx - l.pfc_pause_rx, b.pfc_pause_rx)) AS d_pfc_pause_rx,
       if(isNull(b.pfc_pause_tx) OR isNull(l.pfc_pause_tx), 0, if(b.pfc_pause_tx >= l.pfc_pause_tx, b.pfc_pause_tx - l.pfc_pause_tx, b.pfc_pause_tx)) AS d_pfc_pause_tx,
       if(isNull(b.ecn_marked) OR isNull(l.ecn_marked), 0, if(b.ecn_marked >= l.ecn_marked, b.ecn_marked - l.ecn_marked, b.ecn_marked)) AS d_ecn_marked,
       if(isNull(b.cnp_sent) OR isNull(l.cnp_sent), 0, if(b.cnp_sent >= l.cnp_sent, b.cnp_sent - l.cnp_sent, b.cnp_sent)) AS d_cnp_sent,
       if(isNull(b.cnp_handled) OR isNull(l.cnp_handled), 0, if(b.cnp_handled >= l.cnp_handled, b.cnp_handled - l.cnp_handled, b.cnp_handled)) AS d_cnp_handled,
       if(isNull(b.out_of_sequence) OR isNull(l.out_of_sequence), 0, if(b.out_of_sequence >= l.out_of_sequence, b.out_of_sequence - l.out_of_sequence, b.out_of_sequence)) AS d_out_of_sequence,
       if(isNull(b.local_ack_timeout_err) OR isNull(l.local_ack_timeout_err), 0, if(b.local_ack_timeout_err >= l.local_ack_timeout_err, b.local_ack_timeout_err - l.local_ack_timeout_err, b.local_ack_timeout_err)) AS d_local_ack_timeout_err,
       if(isNull(b.rx_discards_phy) OR isNull(l.rx_discards_phy), 0, if(b.rx_discards_phy >= l.rx_discards_phy, b.rx_discards_phy - l.rx_discards_phy, b.rx_discards_phy)) AS d_rx_discards_phy,
       if(isNull(b.port_xmit_data) OR isNull(l.port_xmit_data), 0, if(b.port_xmit_data >= l.port_xmit_data, b.port_xmit_data - l.port_xmit_data, b.port_xmit_data)) AS d_port_xmit_data,
       if(isNull(b.port_rcv_data) OR isNull(l.port_rcv_data), 0, if(b.port_rcv_data >= l.port_rcv_data, b.port_rcv_data - l.port_rcv_data, b.port_rcv_data)) AS d_port_rcv_data,
       if(isNull(b.port_xmit_pkts) OR isNull(l.port_xmit_pkts), 0, if(b.port_xmit_pkts >= l.port_xmit_pkts, b.port_xmit_pkts - l.port_xmit_pkts, b.port_xmit_pkts)) AS d_port_xmit_pkts,
       if(isNull(b.port_rcv_pkts) OR isNull(l.port_rcv_pkts), 0, if(b.port_rcv_pkts >= l.port_rcv_pkts, b.port_rcv_pkts - l.port_rcv_pkts, b.port_rcv_pkts)) AS d_port_rcv_pkts,
       if(isNull(b.phy_link_down) OR isNull(l.phy_link_down), 0, if(b.phy_link_down >= l.phy_link_down, b.phy_link_down - l.phy_link_down, b.phy_link_down)) AS d_phy_link_down
FROM counter_ingest AS b
LEFT JOIN
(
    SELECT fabric, device, port, ts, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy, port_xmit_data, port_rcv_data, port_xmit_pkts, port_rcv_pkts, phy_link_down
    FROM counter_last FINAL
) AS l ON b.fabric = l.fabric AND b.device = l.device AND b.port = l.port;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_samples TO counter_samples AS
SELECT id, ts, fabric, source, device, port, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy, port_xmit_data, port_rcv_data, port_xmit_pkts, port_rcv_pkts, phy_link_down,
       raw_ber, effective_ber, module_temp_c, rx_power_dbm, width, speed, optic_serial, interval_ms, reset_mask,
       d_symbol_errors, d_link_error_recovery, d_link_downed, d_rcv_errors, d_rcv_remote_phys_errors, d_xmit_discards, d_xmit_wait, d_local_link_integrity_errors, d_excessive_buffer_overrun, d_fec_corrected, d_fec_uncorrectable, d_pfc_pause_rx, d_pfc_pause_tx, d_ecn_marked, d_cnp_sent, d_cnp_handled, d_out_of_sequence, d_local_ack_timeout_err, d_rx_discards_phy, d_port_xmit_data, d_port_rcv_data, d_port_xmit_pkts, d_port_rcv_pkts, d_phy_link_down
FROM counter_delta_stage
WHERE ts > last_ts;

DROP VIEW IF EXISTS mv_counter_last;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_last TO counter_last AS
SELECT fabric, device, port, ts, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy, port_xmit_data, port_rcv_data, port_xmit_pkts, port_rcv_pkts, phy_link_down,
       raw_ber, effective_ber, module_temp_c, rx_power_dbm, width, speed, optic_serial
FROM counter_samples;

DROP VIEW IF EXISTS mv_counter_hourly;

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
       sum(d_port_xmit_data) AS d_port_xmit_data,
       sum(d_port_rcv_data) AS d_port_rcv_data,
       sum(d_port_xmit_pkts) AS d_port_xmit_pkts,
       sum(d_port_rcv_pkts) AS d_port_rcv_pkts,
       sum(d_phy_link_down) AS d_phy_link_down,
       max(raw_ber) AS max_raw_ber,
       max(effective_ber) AS max_effective_ber,
       max(module_temp_c) AS max_module_temp_c,
       min(rx_power_dbm) AS min_rx_power_dbm
FROM counter_samples
GROUP BY fabric, device, port, hour;

-- Samples that reached the engine older than their port's last stored sample: raw values
-- as sent, the port's last ts then (last_ts) and when the engine saw it (recorded).
CREATE TABLE IF NOT EXISTS counter_late
(
    id          String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    device      LowCardinality(String),
    port        UInt16,
    last_ts     DateTime64(3, 'UTC'),
    recorded    DateTime64(3, 'UTC'),
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
    port_xmit_data              Nullable(UInt64),
    port_rcv_data               Nullable(UInt64),
    port_xmit_pkts              Nullable(UInt64),
    port_rcv_pkts               Nullable(UInt64),
    phy_link_down               Nullable(UInt64),
    raw_ber       Nullable(Float64),
    effective_ber Nullable(Float64),
    module_temp_c Nullable(Float32),
    rx_power_dbm  Nullable(Float32),
    width         LowCardinality(Nullable(String)),
    speed         LowCardinality(Nullable(String)),
    optic_serial  Nullable(String)
)
ENGINE = ReplacingMergeTree(recorded)
PARTITION BY toYYYYMMDD(ts)
ORDER BY (fabric, device, port, ts)
TTL toDateTime(ts) + INTERVAL ${raw_counter_retention_days} DAY
SETTINGS ttl_only_drop_parts = 1;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_late TO counter_late AS
SELECT id, ts, fabric, source, device, port, last_ts, now64(3, 'UTC') AS recorded,
       symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy, port_xmit_data, port_rcv_data, port_xmit_pkts, port_rcv_pkts, phy_link_down, raw_ber, effective_ber, module_temp_c, rx_power_dbm, width, speed, optic_serial
FROM counter_delta_stage
WHERE ts < last_ts;

-- The late samples the deltas never took (a replay of a stored sample is left out).
CREATE VIEW IF NOT EXISTS counter_late_samples AS
SELECT *
FROM counter_late FINAL
WHERE (fabric, device, port, ts) NOT IN
    (SELECT fabric, device, port, ts FROM counter_samples
     WHERE ts >= (SELECT min(ts) FROM counter_late));
