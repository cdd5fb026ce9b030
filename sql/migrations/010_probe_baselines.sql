-- 010: pinned probe baselines, the yardstick of probation (return to service under traffic).
--
-- One row per pin or unpin; the current baseline of (fabric, rail, probe, size_bytes, scale)
-- is the latest row by ts, and it counts only while `active` (an unpin writes active = 0
-- with who and when). ReplacingMergeTree on ts keeps the latest per key after merges; the
-- readers take argMax over ts, so the answer is right before a merge too. `links` are the
-- device:port ends the pinned runs crossed: probation refuses a baseline that crossed the
-- cable it judges (a bad link is never its own yardstick). Rows are few (a pin per rail,
-- probe and size): kept for the whole retention like the actions.
CREATE TABLE IF NOT EXISTS probe_baselines
(
    fabric        LowCardinality(String),
    rail          UInt16,
    probe         LowCardinality(String),        -- ib_write_bw | nccl_allreduce
    size_bytes    UInt64,
    scale         UInt32,                        -- ranks the probe spans (2: a pair)
    gbps          Float64,
    active        UInt8,
    pinned_by     String,
    ts            DateTime64(3, 'UTC'),           -- when pinned or unpinned
    links         Array(String),
    note          Nullable(String)
)
ENGINE = ReplacingMergeTree(ts)
ORDER BY (fabric, rail, probe, size_bytes, scale)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;
