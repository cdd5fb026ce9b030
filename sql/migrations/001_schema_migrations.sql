-- 001: the migrations ledger itself.
-- One row per applied migration file. ReplacingMergeTree keyed on the version so that a
-- re-run (every statement here is IF NOT EXISTS) that records a version twice still reads as
-- one row with FINAL. Tiny table: no partitioning, no TTL.
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY version;
