-- 002: one table per contract event kind, as received.
--
-- Idempotency: every table here is a ReplacingMergeTree whose ORDER BY ends in the event's
-- identity (the contract `id`, or (port, ts) for counter samples). At-least-once delivery
-- replays batches after a crash; a replayed row has the same sorting key as the original, so
-- background merges collapse it and every reader that needs exact answers uses FINAL (the
-- cookbook does). With no version column the last inserted copy wins; copies are identical.
--
-- Partitioning: by month (toYYYYMM) for the low-volume event tables, by day for raw counter
-- samples (~144M rows a day at 100k ports / 60 s), so TTL drops whole partitions and a
-- one-day query touches one partition. ORDER BY starts with (fabric, device, port) because
-- almost every question is "this port / these ports over a time range"; the time column
-- follows so a range scan within a port is contiguous.
--
-- Retention: ${retention_days} / ${raw_counter_retention_days} are substituted from
-- settings.ledger at migrate time; TTL ... DELETE drops expired rows at merge time and
-- ttl_only_drop_parts drops whole expired partitions cheaply.
--
-- Strings that repeat (fabric, device, source, enums) are LowCardinality: a 100k-port
-- fabric has a few thousand device names.

CREATE TABLE IF NOT EXISTS port_events
(
    id         String,
    ts         DateTime64(3, 'UTC'),
    fabric     LowCardinality(String),
    source     LowCardinality(String),
    device     LowCardinality(String),
    port       UInt16,
    state      LowCardinality(String),          -- 'down' | 'up'
    trap       Nullable(UInt32),
    phys_state LowCardinality(Nullable(String)),
    reason     Nullable(String),
    inserted_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, device, port, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY
SETTINGS ttl_only_drop_parts = 1;

-- Raw cumulative counters as read, plus the per-interval deltas derived on insert by
-- mv_counter_deltas (005): writers insert raw samples into counter_ingest, never here.
-- A decrease of a counter is a reset: the delta is then the new value itself (it counts
-- from zero) and the counter's bit is set in reset_mask (bit i = COUNTER_FIELDS[i]). The
-- first sample of a port has zero deltas and interval_ms 0.
CREATE TABLE IF NOT EXISTS counter_samples
(
    id          String,                        -- the Counters batch event id
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
    optic_serial  Nullable(String),            -- PortSample extra field, when a collector has it
    interval_ms   UInt32,                      -- since this port's previous sample; 0 = first
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
    -- Link errors in the interval: the physical-layer error counters summed (not
    -- xmit_wait/discards, which are congestion, nor fec_corrected, which is healthy FEC).
    d_errors UInt64 MATERIALIZED d_symbol_errors + d_link_error_recovery + d_rcv_errors
        + d_rcv_remote_phys_errors + d_local_link_integrity_errors
        + d_excessive_buffer_overrun + d_fec_uncorrectable
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (fabric, device, port, ts)
TTL toDateTime(ts) + INTERVAL ${raw_counter_retention_days} DAY
SETTINGS ttl_only_drop_parts = 1;

CREATE TABLE IF NOT EXISTS probes
(
    id            String,
    ts            DateTime64(3, 'UTC'),
    fabric        LowCardinality(String),
    source        LowCardinality(String),
    probe         LowCardinality(String),      -- ib_write_bw | nccl_allreduce
    src           String,
    dst           String,
    rail          UInt16,
    size_bytes    UInt64,
    bw_gbps       Float64,
    baseline_gbps Nullable(Float64)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, rail, probe, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY
SETTINGS ttl_only_drop_parts = 1;

-- One row per snapshot (its event id), so "the latest snapshot" is one small lookup.
CREATE TABLE IF NOT EXISTS topology_snapshots
(
    snapshot_id String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    links       UInt32
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, ts, snapshot_id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- Each discovered cable twice, once from each end, so "who is port X's peer in snapshot S"
-- is a primary-key lookup on (fabric, snapshot_id, device, port) whichever end X is.
CREATE TABLE IF NOT EXISTS topology_links
(
    snapshot_id String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    device      LowCardinality(String),
    port        UInt16,
    peer_device LowCardinality(String),
    peer_port   UInt16,
    width       LowCardinality(Nullable(String)),
    speed       LowCardinality(Nullable(String)),
    end         LowCardinality(String)         -- 'a' | 'b': which end the event listed first
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, snapshot_id, device, port)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- Where a device sits: scalable unit and rail. The writer fills it from each topology
-- snapshot: a switch named like `leaf-su01-r3` is SU 1 rail 3 (the simulator's and the
-- cable plan's naming); a host HCA (`node0042/mlx5_3`) takes the SU and rail of the leaf its
-- port is cabled to (rail-optimized: NIC k of every node plugs into leaf k). Devices that
-- match neither stay NULL. ReplacingMergeTree(ts): the latest snapshot wins.
CREATE TABLE IF NOT EXISTS device_location
(
    fabric LowCardinality(String),
    device LowCardinality(String),
    su     Nullable(UInt16),
    rail   Nullable(UInt16),
    ts     DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(ts)
ORDER BY (fabric, device);

CREATE TABLE IF NOT EXISTS detections
(
    id        String,
    ts        DateTime64(3, 'UTC'),
    fabric    LowCardinality(String),
    source    LowCardinality(String),
    device    LowCardinality(String),
    port      UInt16,
    detection LowCardinality(String),
    severity  LowCardinality(String),
    action    LowCardinality(String),
    episode   String,
    evidence  String CODEC(ZSTD(3))            -- the evidence object as JSON
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, device, port, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- What runbooks did (or would have done in shadow mode): workflow id, actor, before/after.
CREATE TABLE IF NOT EXISTS actions
(
    id          String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    device      LowCardinality(String),
    port        UInt16,
    workflow_id String,
    step        LowCardinality(String),        -- evidence | budget | isolate | ticket | ladder:<rung> | check:<name> | return | abort
    actor       LowCardinality(String),
    outcome     LowCardinality(String),        -- done | refused | failed | skipped | dry_run
    before      Nullable(String) CODEC(ZSTD(3)), -- JSON
    after       Nullable(String) CODEC(ZSTD(3)), -- JSON
    note        Nullable(String),
    dry_run     UInt8
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, device, port, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- Tool output captured before anything changes (perfquery, mlxlink, cable info).
CREATE TABLE IF NOT EXISTS evidence
(
    id          String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    device      LowCardinality(String),
    port        UInt16,
    workflow_id String,
    tool        LowCardinality(String),
    output      String CODEC(ZSTD(6)),
    exit_code   Nullable(Int32)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, device, port, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- Messages that failed validation. A dead letter has no contract id; the writer derives one
-- from (topic, partition, offset) when known, else from a hash of the raw bytes and reason,
-- so a replayed DLQ batch collapses like any other.
CREATE TABLE IF NOT EXISTS dead_letters
(
    id           String,
    ts           DateTime64(3, 'UTC'),
    reason       String,
    path         String,
    source_topic LowCardinality(Nullable(String)),
    partition    Nullable(Int32),
    offset       Nullable(Int64),
    raw_b64      String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;
