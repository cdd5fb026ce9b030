-- 013: counter_hourly takes each stored sample as its own row, without a GROUP BY per insert.
--
-- The ledger's writes hold at most one sample per port an insert (ledger.base.sample_generations,
-- ledger.columnar's generations), so the view's GROUP BY fabric, device, port, hour made one
-- group per sample: a hash table of 100k keys and ~35 aggregates for every 100k-sample
-- insert that left the rows as they were (measured: the engine's insert work 0.29 s against
-- 0.36 s per 100k samples, chdb 4.4, BENCHMARKS.md). Every column is a
-- SimpleAggregateFunction, so a row is its own state: merges add rows of one port-hour up as
-- before, and readers already sum (or read FINAL), since rows of different inserts were never
-- combined before a merge. The same rows, the same sums. (A bulk insert of several polls per
-- port straight into counter_samples, as benchmarks/ledger_bench.py builds its day, now
-- stores a row per sample where the GROUP BY folded them; merges fold them later.)

DROP VIEW IF EXISTS mv_counter_hourly;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_counter_hourly TO counter_hourly AS
SELECT fabric, device, port,
       toStartOfHour(toDateTime(ts, 'UTC')) AS hour,
       toUInt64(1) AS samples,
       toUInt64(interval_ms) AS covered_ms,
       toUInt64(reset_mask != 0) AS resets,
       d_errors AS d_errors,
       d_symbol_errors AS d_symbol_errors,
       d_link_error_recovery AS d_link_error_recovery,
       d_link_downed AS d_link_downed,
       d_rcv_errors AS d_rcv_errors,
       d_rcv_remote_phys_errors AS d_rcv_remote_phys_errors,
       d_xmit_discards AS d_xmit_discards,
       d_xmit_wait AS d_xmit_wait,
       d_local_link_integrity_errors AS d_local_link_integrity_errors,
       d_excessive_buffer_overrun AS d_excessive_buffer_overrun,
       d_fec_corrected AS d_fec_corrected,
       d_fec_uncorrectable AS d_fec_uncorrectable,
       d_pfc_pause_rx AS d_pfc_pause_rx,
       d_pfc_pause_tx AS d_pfc_pause_tx,
       d_ecn_marked AS d_ecn_marked,
       d_cnp_sent AS d_cnp_sent,
       d_cnp_handled AS d_cnp_handled,
       d_out_of_sequence AS d_out_of_sequence,
       d_local_ack_timeout_err AS d_local_ack_timeout_err,
       d_rx_discards_phy AS d_rx_discards_phy,
       d_port_xmit_data AS d_port_xmit_data,
       d_port_rcv_data AS d_port_rcv_data,
       d_port_xmit_pkts AS d_port_xmit_pkts,
       d_port_rcv_pkts AS d_port_rcv_pkts,
       d_phy_link_down AS d_phy_link_down,
       raw_ber AS max_raw_ber,
       effective_ber AS max_effective_ber,
       module_temp_c AS max_module_temp_c,
       rx_power_dbm AS min_rx_power_dbm
FROM counter_samples;
