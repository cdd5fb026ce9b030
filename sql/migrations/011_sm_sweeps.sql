-- 011: what the subnet manager did (fabric.sm): every SM event, and every heavy sweep.
--
-- `sm_events` keeps every message of fabric.sm (a heavy sweep, an SM's state, the standby
-- list, a trap storm); `sm_sweeps` one row per heavy sweep: when it began and ended (its
-- SUBNET UP), how long it took, what forced it and the ports and devices whose traps did.
-- `start` / `duration_ms` are NULL where the SM's log level did not show the sweep's
-- beginning: unknown, never 0. The audit's NCCL timeout rule (fabricwatch audit nccl)
-- compares NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT with max(duration_ms) here. Both tables are
-- small (a sweep per link change: hundreds a day), so history stays for the full retention.
CREATE TABLE IF NOT EXISTS sm_events
(
    id       String,
    ts       DateTime64(3, 'UTC'),
    fabric   LowCardinality(String),
    source   LowCardinality(String),           -- opensm | sminfo | saquery | ufm | sim
    event    LowCardinality(String),           -- sweep | state | standby | trap_storm
    sm       String,                           -- the SM the message is about (port GUID or name)
    state    Nullable(String),                 -- master | standby | discovering | not_active
    priority Nullable(UInt8),
    sms      Array(String),                    -- standby: the standby SMs listed
    trap     Nullable(UInt32),
    count    Nullable(UInt32),
    device   Nullable(String),
    port     Nullable(UInt16),
    disabled UInt8,
    trigger  Nullable(String),
    ports    Array(String)                     -- sweep: port keys device:port
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, event, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

CREATE TABLE IF NOT EXISTS sm_sweeps
(
    id          String,
    ts          DateTime64(3, 'UTC'),
    fabric      LowCardinality(String),
    source      LowCardinality(String),
    sm          String,
    start       Nullable(DateTime64(3, 'UTC')),
    end         DateTime64(3, 'UTC'),
    duration_ms Nullable(UInt32),
    trigger     Nullable(String),              -- trap 128 | trap 144 | signal HUP | start-up | ...
    ports       Array(String),                 -- the ports whose change the sweep was for
    devices     Array(String)                  -- the devices whose traps forced it
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, end, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;
