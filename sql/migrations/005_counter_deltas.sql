-- 005: counter deltas computed in the engine at insert time.
--
-- The writer inserts raw samples into counter_ingest (engine Null: it stores nothing); this
-- materialized view turns each inserted block into counter_samples rows with per-interval
-- deltas. A delta needs the port's previous sample: inside the block it is the previous
-- row of the same port in event-time order (lagInFrame), for a port's first row in the
-- block it is the port's last stored sample (counter_last, kept by mv_counter_last).
--
-- Why a view and not the writer: the engine does this vectorised (a Python loop over 19
-- counters per sample was the bottleneck at 100k ports), and the previous value comes from
-- the ledger itself, so any writer process (or several, each owning some devices, as Kafka
-- partitions by device) gets the same deltas with no cache to warm or lose.
--
-- Replays: a sample at or before the port's last stored sample is dropped here (WHERE
-- ts > last ts), and duplicates within a block are collapsed (LIMIT 1 BY), so a replayed
-- batch never reaches counter_samples or the hourly sums again.
--
-- Resets: a counter lower than its previous value was reset; its delta is the new value
-- (it counted from zero) and its bit (position in the column list, i.e. COUNTER_FIELDS)
-- is set in reset_mask. A counter missing (NULL) now or before has delta 0.
CREATE TABLE IF NOT EXISTS counter_ingest
(
    id          String,
    ts          DateTime64(3, 'UTC'),
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
    raw_ber       Nullable(Float64),
    effective_ber Nullable(Float64),
    module_temp_c Nullable(Float32),
    rx_power_dbm  Nullable(Float32),
    width         LowCardinality(Nullable(String)),
    speed         LowCardinality(Nullable(String)),
    optic_serial  Nullable(String)
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_deltas TO counter_samples AS
SELECT id, ts, fabric, source, device, port, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy,
       raw_ber, effective_ber, module_temp_c, rx_power_dbm, width, speed, optic_serial,
       toUInt32(if(isNull(p_ts), 0, least(dateDiff('millisecond', p_ts, ts), 4294967295)))
           AS interval_ms,
       toUInt32(if(symbol_errors < p_symbol_errors, 1, 0) + if(link_error_recovery < p_link_error_recovery, 2, 0) + if(link_downed < p_link_downed, 4, 0) + if(rcv_errors < p_rcv_errors, 8, 0) + if(rcv_remote_phys_errors < p_rcv_remote_phys_errors, 16, 0) + if(xmit_discards < p_xmit_discards, 32, 0) + if(xmit_wait < p_xmit_wait, 64, 0) + if(local_link_integrity_errors < p_local_link_integrity_errors, 128, 0) + if(excessive_buffer_overrun < p_excessive_buffer_overrun, 256, 0) + if(fec_corrected < p_fec_corrected, 512, 0) + if(fec_uncorrectable < p_fec_uncorrectable, 1024, 0) + if(pfc_pause_rx < p_pfc_pause_rx, 2048, 0) + if(pfc_pause_tx < p_pfc_pause_tx, 4096, 0) + if(ecn_marked < p_ecn_marked, 8192, 0) + if(cnp_sent < p_cnp_sent, 16384, 0) + if(cnp_handled < p_cnp_handled, 32768, 0) + if(out_of_sequence < p_out_of_sequence, 65536, 0) + if(local_ack_timeout_err < p_local_ack_timeout_err, 131072, 0) + if(rx_discards_phy < p_rx_discards_phy, 262144, 0)) AS reset_mask,
       if(isNull(symbol_errors) OR isNull(p_symbol_errors), 0, if(symbol_errors >= p_symbol_errors, symbol_errors - p_symbol_errors, symbol_errors)) AS d_symbol_errors,
       if(isNull(link_error_recovery) OR isNull(p_link_error_recovery), 0, if(link_error_recovery >= p_link_error_recovery, link_error_recovery - p_link_error_recovery, link_error_recovery)) AS d_link_error_recovery,
       if(isNull(link_downed) OR isNull(p_link_downed), 0, if(link_downed >= p_link_downed, link_downed - p_link_downed, link_downed)) AS d_link_downed,
       if(isNull(rcv_errors) OR isNull(p_rcv_errors), 0, if(rcv_errors >= p_rcv_errors, rcv_errors - p_rcv_errors, rcv_errors)) AS d_rcv_errors,
       if(isNull(rcv_remote_phys_errors) OR isNull(p_rcv_remote_phys_errors), 0, if(rcv_remote_phys_errors >= p_rcv_remote_phys_errors, rcv_remote_phys_errors - p_rcv_remote_phys_errors, rcv_remote_phys_errors)) AS d_rcv_remote_phys_errors,
       if(isNull(xmit_discards) OR isNull(p_xmit_discards), 0, if(xmit_discards >= p_xmit_discards, xmit_discards - p_xmit_discards, xmit_discards)) AS d_xmit_discards,
       if(isNull(xmit_wait) OR isNull(p_xmit_wait), 0, if(xmit_wait >= p_xmit_wait, xmit_wait - p_xmit_wait, xmit_wait)) AS d_xmit_wait,
       if(isNull(local_link_integrity_errors) OR isNull(p_local_link_integrity_errors), 0, if(local_link_integrity_errors >= p_local_link_integrity_errors, local_link_integrity_errors - p_local_link_integrity_errors, local_link_integrity_errors)) AS d_local_link_integrity_errors,
       if(isNull(excessive_buffer_overrun) OR isNull(p_excessive_buffer_overrun), 0, if(excessive_buffer_overrun >= p_excessive_buffer_overrun, excessive_buffer_overrun - p_excessive_buffer_overrun, excessive_buffer_overrun)) AS d_excessive_buffer_overrun,
       if(isNull(fec_corrected) OR isNull(p_fec_corrected), 0, if(fec_corrected >= p_fec_corrected, fec_corrected - p_fec_corrected, fec_corrected)) AS d_fec_corrected,
       if(isNull(fec_uncorrectable) OR isNull(p_fec_uncorrectable), 0, if(fec_uncorrectable >= p_fec_uncorrectable, fec_uncorrectable - p_fec_uncorrectable, fec_uncorrectable)) AS d_fec_uncorrectable,
       if(isNull(pfc_pause_rx) OR isNull(p_pfc_pause_rx), 0, if(pfc_pause_rx >= p_pfc_pause_rx, pfc_pause_rx - p_pfc_pause_rx, pfc_pause_rx)) AS d_pfc_pause_rx,
       if(isNull(pfc_pause_tx) OR isNull(p_pfc_pause_tx), 0, if(pfc_pause_tx >= p_pfc_pause_tx, pfc_pause_tx - p_pfc_pause_tx, pfc_pause_tx)) AS d_pfc_pause_tx,
       if(isNull(ecn_marked) OR isNull(p_ecn_marked), 0, if(ecn_marked >= p_ecn_marked, ecn_marked - p_ecn_marked, ecn_marked)) AS d_ecn_marked,
       if(isNull(cnp_sent) OR isNull(p_cnp_sent), 0, if(cnp_sent >= p_cnp_sent, cnp_sent - p_cnp_sent, cnp_sent)) AS d_cnp_sent,
       if(isNull(cnp_handled) OR isNull(p_cnp_handled), 0, if(cnp_handled >= p_cnp_handled, cnp_handled - p_cnp_handled, cnp_handled)) AS d_cnp_handled,
       if(isNull(out_of_sequence) OR isNull(p_out_of_sequence), 0, if(out_of_sequence >= p_out_of_sequence, out_of_sequence - p_out_of_sequence, out_of_sequence)) AS d_out_of_sequence,
       if(isNull(local_ack_timeout_err) OR isNull(p_local_ack_timeout_err), 0, if(local_ack_timeout_err >= p_local_ack_timeout_err, local_ack_timeout_err - p_local_ack_timeout_err, local_ack_timeout_err)) AS d_local_ack_timeout_err,
       if(isNull(rx_discards_phy) OR isNull(p_rx_discards_phy), 0, if(rx_discards_phy >= p_rx_discards_phy, rx_discards_phy - p_rx_discards_phy, rx_discards_phy)) AS d_rx_discards_phy
FROM
(
    SELECT b.*,
           row_number() OVER w = 1 AS first,
           if(first, if(l.ts > toDateTime64(0, 3, 'UTC'), toNullable(l.ts), NULL),
              toNullable(lagInFrame(b.ts) OVER w)) AS p_ts,
           if(first, l.symbol_errors, lagInFrame(b.symbol_errors) OVER w) AS p_symbol_errors,
           if(first, l.link_error_recovery, lagInFrame(b.link_error_recovery) OVER w) AS p_link_error_recovery,
           if(first, l.link_downed, lagInFrame(b.link_downed) OVER w) AS p_link_downed,
           if(first, l.rcv_errors, lagInFrame(b.rcv_errors) OVER w) AS p_rcv_errors,
           if(first, l.rcv_remote_phys_errors, lagInFrame(b.rcv_remote_phys_errors) OVER w) AS p_rcv_remote_phys_errors,
           if(first, l.xmit_discards, lagInFrame(b.xmit_discards) OVER w) AS p_xmit_discards,
           if(first, l.xmit_wait, lagInFrame(b.xmit_wait) OVER w) AS p_xmit_wait,
           if(first, l.local_link_integrity_errors, lagInFrame(b.local_link_integrity_errors) OVER w) AS p_local_link_integrity_errors,
           if(first, l.excessive_buffer_overrun, lagInFrame(b.excessive_buffer_overrun) OVER w) AS p_excessive_buffer_overrun,
           if(first, l.fec_corrected, lagInFrame(b.fec_corrected) OVER w) AS p_fec_corrected,
           if(first, l.fec_uncorrectable, lagInFrame(b.fec_uncorrectable) OVER w) AS p_fec_uncorrectable,
           if(first, l.pfc_pause_rx, lagInFrame(b.pfc_pause_rx) OVER w) AS p_pfc_pause_rx,
           if(first, l.pfc_pause_tx, lagInFrame(b.pfc_pause_tx) OVER w) AS p_pfc_pause_tx,
           if(first, l.ecn_marked, lagInFrame(b.ecn_marked) OVER w) AS p_ecn_marked,
           if(first, l.cnp_sent, lagInFrame(b.cnp_sent) OVER w) AS p_cnp_sent,
           if(first, l.cnp_handled, lagInFrame(b.cnp_handled) OVER w) AS p_cnp_handled,
           if(first, l.out_of_sequence, lagInFrame(b.out_of_sequence) OVER w) AS p_out_of_sequence,
           if(first, l.local_ack_timeout_err, lagInFrame(b.local_ack_timeout_err) OVER w) AS p_local_ack_timeout_err,
           if(first, l.rx_discards_phy, lagInFrame(b.rx_discards_phy) OVER w) AS p_rx_discards_phy
    FROM
    (
        SELECT * FROM counter_ingest
        LIMIT 1 BY fabric, device, port, ts
    ) AS b
    LEFT JOIN
    (
        SELECT fabric, device, port, ts, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy
        FROM counter_last FINAL
    ) AS l ON b.fabric = l.fabric AND b.device = l.device AND b.port = l.port
    WHERE b.ts > l.ts
    WINDOW w AS (PARTITION BY b.fabric, b.device, b.port ORDER BY b.ts
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
);
