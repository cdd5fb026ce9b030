-- 005: counter deltas computed in the engine at insert time.
--
-- Writers insert raw samples into counter_ingest (engine Null: it stores nothing); this
-- materialized view turns each inserted block into counter_samples rows with per-interval
-- deltas against the port's last stored sample (counter_last, kept by mv_counter_last).
-- The writer (ledger.base) sends at most one sample per port per insert: a batch holding
-- several polls of a port goes in as several inserts, oldest first, so each one's
-- "previous sample" is already in counter_last. (A plain join: a window function over the
-- block to chain several samples of a port was ~3x slower at 100k ports.)
--
-- Why in a view and not in the writer: the engine does it vectorised (a Python loop over
-- 19 counters per sample was the bottleneck at 100k ports), and the previous value comes
-- from the ledger itself, so any writer process (or several, each owning some devices, as
-- Kafka partitions by device) gets the same deltas with no cache to warm or lose.
--
-- Replays: a sample at or before the port's last stored sample is dropped here
-- (WHERE ts > last ts), so a replayed batch never reaches counter_samples or the hourly
-- sums again. A port never seen has last ts 1970 (the join's default): it passes, with
-- zero deltas and interval 0.
--
-- Resets: a counter lower than its previous value was reset; its delta is the new value
-- (it counted from zero) and its bit (position in the column list, i.e. COUNTER_FIELDS)
-- is set in reset_mask. A counter missing (NULL) now or in the previous sample has delta 0.
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
SELECT b.id AS id, b.ts AS ts, b.fabric AS fabric, b.source AS source, b.device AS device,
       b.port AS port, b.symbol_errors AS symbol_errors, b.link_error_recovery AS link_error_recovery, b.link_downed AS link_downed, b.rcv_errors AS rcv_errors, b.rcv_remote_phys_errors AS rcv_remote_phys_errors, b.xmit_discards AS xmit_discards, b.xmit_wait AS xmit_wait, b.local_link_integrity_errors AS local_link_integrity_errors, b.excessive_buffer_overrun AS excessive_buffer_overrun, b.fec_corrected AS fec_corrected, b.fec_uncorrectable AS fec_uncorrectable, b.pfc_pause_rx AS pfc_pause_rx, b.pfc_pause_tx AS pfc_pause_tx, b.ecn_marked AS ecn_marked, b.cnp_sent AS cnp_sent, b.cnp_handled AS cnp_handled, b.out_of_sequence AS out_of_sequence, b.local_ack_timeout_err AS local_ack_timeout_err, b.rx_discards_phy AS rx_discards_phy,
       b.raw_ber AS raw_ber, b.effective_ber AS effective_ber,
       b.module_temp_c AS module_temp_c, b.rx_power_dbm AS rx_power_dbm, b.width AS width,
       b.speed AS speed, b.optic_serial AS optic_serial,
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
               + if(b.rx_discards_phy < l.rx_discards_phy, 262144, 0), 0)) AS reset_mask,
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
       if(isNull(b.rx_discards_phy) OR isNull(l.rx_discards_phy), 0, if(b.rx_discards_phy >= l.rx_discards_phy, b.rx_discards_phy - l.rx_discards_phy, b.rx_discards_phy)) AS d_rx_discards_phy
FROM counter_ingest AS b
LEFT JOIN
(
    SELECT fabric, device, port, ts, symbol_errors, link_error_recovery, link_downed, rcv_errors, rcv_remote_phys_errors, xmit_discards, xmit_wait, local_link_integrity_errors, excessive_buffer_overrun, fec_corrected, fec_uncorrectable, pfc_pause_rx, pfc_pause_tx, ecn_marked, cnp_sent, cnp_handled, out_of_sequence, local_ack_timeout_err, rx_discards_phy
    FROM counter_last FINAL
) AS l ON b.fabric = l.fabric AND b.device = l.device AND b.port = l.port
WHERE b.ts > l.ts;
