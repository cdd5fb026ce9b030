-- 009: incidents (one root cause, its member ports) and maintenance windows.
--
-- `incidents` keeps every message of fabric.incidents (open, each update with the whole
-- member list, closed); an incident's state now is its latest row by ts (`incidents_current`).
-- `maintenance_windows` keeps every message of fabric.maintenance the same way (a window
-- ended early comes back with state 'ended'). A detection that belongs to an open incident,
-- or falls in a window, names it in `incident` / `maintenance`: recorded, and it started no
-- port runbook. Both are few (a handful a day), so history stays for the full retention.
ALTER TABLE detections ADD COLUMN IF NOT EXISTS incident Nullable(String);

ALTER TABLE detections ADD COLUMN IF NOT EXISTS maintenance Nullable(String);

CREATE TABLE IF NOT EXISTS incidents
(
    id       String,
    ts       DateTime64(3, 'UTC'),
    fabric   LowCardinality(String),
    source   LowCardinality(String),
    incident String,
    cause    LowCardinality(String),           -- switch_reboot | node_reboot | sm_event | maintenance | breaker
    root     String,                           -- the switch, host, SM node or window scope
    state    LowCardinality(String),           -- open | update | closed
    started  DateTime64(3, 'UTC'),
    ended    Nullable(DateTime64(3, 'UTC')),
    members  Array(String),                    -- port keys device:port
    su       Nullable(String),
    reason   Nullable(String),
    evidence String CODEC(ZSTD(3))             -- the evidence object as JSON
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, incident, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

CREATE TABLE IF NOT EXISTS maintenance_windows
(
    id        String,
    ts        DateTime64(3, 'UTC'),
    fabric    LowCardinality(String),
    source    LowCardinality(String),
    window    String,
    scope     LowCardinality(String),          -- device | su | fabric
    target    String,                          -- a device, device:port, an SU, the fabric
    start     DateTime64(3, 'UTC'),
    end       DateTime64(3, 'UTC'),
    state     LowCardinality(String),          -- active | ended
    reason    String,
    actor     String,
    exclusion UInt8
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (fabric, window, ts, id)
TTL toDateTime(ts) + INTERVAL ${retention_days} DAY;

-- Each incident as it stands now: its latest message.
CREATE VIEW IF NOT EXISTS incidents_current AS
SELECT fabric, incident,
       argMax(cause, ts) AS cause, argMax(root, ts) AS root, argMax(state, ts) AS state,
       min(started) AS started, argMax(ended, ts) AS ended, argMax(members, ts) AS members,
       argMax(su, ts) AS su, argMax(reason, ts) AS reason, max(ts) AS updated
FROM incidents FINAL
GROUP BY fabric, incident;
