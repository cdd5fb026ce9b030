-- 007: where jobs run (fabric.jobs): one row per placement message, every message kept.
--
-- A job's current placement is its latest row by ts (a requeued job comes back on other
-- nodes; a finished one with its end). Rows are few (a placement per job start, requeue and
-- end: thousands a day), so history stays for the full retention and a job's impact can be
-- asked long after it ended. ReplacingMergeTree on the message id, like every event table:
-- a replayed batch collapses. ORDER BY (fabric, job, ts): a job's history is one range.
-- `nodes` are host names (the part of an HCA's name before '/'), in the scheduler's order.
CREATE TABLE IF NOT EXISTS job_placements
(
    id            String,
    ts            DateTime64(3, 'UTC'),
    fabric        LowCardinality(String),
    source        LowCardinality(String),        -- slurm | kubernetes | sim | ...
    job           String,
    name          Nullable(String),
    state         LowCardinality(String),        -- running | completed | failed | pending | ...
    nodes         Array(String),
    start         Nullable(DateTime64(3, 'UTC')),
    end           Nullable(DateTime64(3, 'UTC')), -- running jobs: the scheduler's expected end
    gpus_per_node Nullable(UInt16)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, job, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;
