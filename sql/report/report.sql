-- The queries behind `fabricwatch report` and the demo's closing report.
-- Each starts with a `-- name:` line. Every query reads the window [since, until) given as
-- epoch milliseconds in the parameters {since:Int64} and {until:Int64}, through FINAL so a
-- replayed batch never counts twice; {bucket_ms:Int64} is the plot bucket.

-- name: count_port_events
SELECT count() AS n FROM port_events FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: count_counter_samples
SELECT count() AS n FROM counter_samples FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: count_probes
SELECT count() AS n FROM probes FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: count_detections
SELECT count() AS n FROM detections FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: count_actions
SELECT count() AS n FROM actions FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: count_evidence
SELECT count() AS n FROM evidence FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: detections_by_kind
SELECT detection, count() AS n FROM detections FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY detection ORDER BY n DESC;

-- name: detection_episodes
-- One row per episode: when it was first seen, and how many detections it carried.
SELECT toUnixTimestamp64Milli(min(ts)) AS ts_ms, any(detection) AS detection, device, port,
       any(severity) AS severity, any(action) AS action, episode, count() AS n
FROM detections FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY device, port, episode ORDER BY ts_ms LIMIT 1000;

-- name: downs
SELECT intDiv(toUnixTimestamp64Milli(ts), {bucket_ms:Int64}) * {bucket_ms:Int64} AS t, count() AS n
FROM port_events FINAL
WHERE state = 'down'
  AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY t ORDER BY t;

-- name: errors
SELECT intDiv(toUnixTimestamp64Milli(ts), {bucket_ms:Int64}) * {bucket_ms:Int64} AS t, sum(d_errors) AS n
FROM counter_samples FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY t ORDER BY t;

-- name: heat
-- Link errors by scalable unit and rail, through where each device sits.
SELECT loc.su AS su, loc.rail AS rail, sum(c.errors) AS n
FROM (SELECT fabric, device, sum(d_errors) AS errors FROM counter_samples FINAL
      WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
      GROUP BY fabric, device) AS c
INNER JOIN (SELECT fabric, device, su, rail FROM device_location FINAL
            WHERE su IS NOT NULL AND rail IS NOT NULL) AS loc
        ON c.fabric = loc.fabric AND c.device = loc.device
GROUP BY su, rail;

-- name: top_ports
SELECT device, port, sum(d_errors) AS n FROM counter_samples FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY device, port HAVING n > 0 ORDER BY n DESC LIMIT 12;

-- name: isolation_latency
-- From a port's first detection to its first isolation (done, or decided in shadow mode).
SELECT d.device AS device, d.port AS port, d.detection AS detection, d.d_ms AS d_ms, a.a_ms AS a_ms
FROM (SELECT device, port, argMin(detection, ts) AS detection, toUnixTimestamp64Milli(min(ts)) AS d_ms
      FROM detections FINAL
      WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
      GROUP BY device, port) AS d
INNER JOIN (SELECT device, port, toUnixTimestamp64Milli(min(ts)) AS a_ms FROM actions FINAL
            WHERE step = 'isolate' AND outcome IN ('done', 'dry_run')
              AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
            GROUP BY device, port) AS a
        ON d.device = a.device AND d.port = a.port
ORDER BY d_ms LIMIT 1000;

-- name: runbook_steps
SELECT workflow_id, toUnixTimestamp64Milli(ts) AS ts_ms, step, outcome FROM actions FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
ORDER BY workflow_id, ts_ms, id LIMIT 20000;

-- name: probation
-- Return to service under traffic: each runbook's probation records and the checks' results
-- (the measurement against the pinned baseline is in the note), in time order.
SELECT workflow_id, toUnixTimestamp64Milli(ts) AS ts_ms, step, outcome, note FROM actions FINAL
WHERE (step = 'probation' OR step LIKE 'check:%') AND dry_run = 0
  AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
ORDER BY workflow_id, ts_ms, id LIMIT 5000;

-- name: job_fabrics
-- The fabrics with job placements (the report's jobs section reads each).
SELECT DISTINCT fabric FROM job_placements FINAL
WHERE ts < fromUnixTimestamp64Milli({until:Int64}) ORDER BY fabric;
-- name: ports_by_status
-- Every port's state now (port_ledger.status, migration 008): a port whose device or
-- itself stopped reporting is 'unknown', never counted as ok.
SELECT status, count() AS n FROM port_ledger GROUP BY status ORDER BY status;

-- name: unknown_ports
SELECT device, port, toUnixTimestamp64Milli(stale_since) AS since_ms, last_sample_ts
FROM port_ledger WHERE status = 'unknown' ORDER BY since_ms, device, port LIMIT 1000;
