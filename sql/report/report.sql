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

-- name: detections_over_time
-- Detections per bin and kind (the report fills empty bins with zero).
SELECT intDiv(toUnixTimestamp64Milli(ts), {bucket_ms:Int64}) * {bucket_ms:Int64} AS t,
       toString(detection) AS kind, count() AS n
FROM detections FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY t, kind ORDER BY t, kind;

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

-- name: runbook_steps
SELECT workflow_id, toUnixTimestamp64Milli(ts) AS ts_ms, step, outcome FROM actions FINAL
WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
ORDER BY workflow_id, ts_ms, id LIMIT 20000;

-- name: probation_records
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

-- name: heat_isolations
-- Isolations (done, or decided in shadow mode) by scalable unit and rail of the isolated end.
SELECT loc.su AS su, loc.rail AS rail, count() AS n
FROM (SELECT fabric, device FROM actions FINAL
      WHERE step = 'isolate' AND outcome IN ('done', 'dry_run')
        AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})) AS a
INNER JOIN (SELECT fabric, device, su, rail FROM device_location FINAL
            WHERE su IS NOT NULL AND rail IS NOT NULL) AS loc
        ON a.fabric = loc.fabric AND a.device = loc.device
GROUP BY su, rail;

-- name: incidents_in_window
-- Every incident open at some time in the window (its state now, from incidents_current).
SELECT fabric, incident, toString(cause) AS cause, root, toString(state) AS state,
       toUnixTimestamp64Milli(started) AS started_ms,
       if(ended IS NULL, NULL, toUnixTimestamp64Milli(assumeNotNull(ended))) AS ended_ms,
       members, su, reason, toUnixTimestamp64Milli(updated) AS updated_ms
FROM incidents_current
WHERE state != 'closed'
   OR (started < fromUnixTimestamp64Milli({until:Int64})
       AND (ended IS NULL OR ended >= fromUnixTimestamp64Milli({since:Int64})))
ORDER BY started_ms, incident;

-- name: pages
-- Who was told: the runbooks' ticket and page records (a ticket opened, a page that failed,
-- the breaker's page, an escalation) since {since}; the report matches them to incidents
-- and runbooks by workflow id and port.
SELECT fabric, device, port, workflow_id, toString(step) AS step, toString(actor) AS actor,
       toString(outcome) AS outcome, note, toUnixTimestamp64Milli(ts) AS ts_ms
FROM actions FINAL
WHERE (step IN ('ticket', 'page', 'breaker', 'escalate') OR startsWith(step, 'ticket:')
       OR startsWith(step, 'page'))
  AND ts >= fromUnixTimestamp64Milli({since:Int64})
ORDER BY ts_ms;

-- name: runbook_latest
-- Each runbook run (workflow id and run id, from the record id `{workflow}/{run}/{seq}`) with
-- its latest record; ties within one millisecond go by the record's sequence number.
SELECT workflow_id, run_id, any(fabric) AS fabric, argMax(device, k) AS device,
       argMax(port, k) AS port, argMax(toString(step), k) AS step,
       argMax(toString(outcome), k) AS outcome, argMax(note, k) AS note,
       argMax(toString(actor), k) AS actor, toUnixTimestamp64Milli(max(ts)) AS ts_ms,
       toUnixTimestamp64Milli(min(ts)) AS started_ms, max(dry_run) AS dry_run
FROM (SELECT *, arrayElement(splitByChar('/', id), -2) AS run_id,
             (ts, toUInt64OrZero(arrayElement(splitByChar('/', id), -1))) AS k
      FROM actions FINAL)
GROUP BY workflow_id, run_id
ORDER BY ts_ms;

-- name: probation
-- Runs with a `probation` record and no return, outcome or abort after the latest one: the
-- cable is back in service on trial. The latest `check:` record since then says how it goes
-- (its measurement in `after`).
SELECT workflow_id, run_id, any(fabric) AS fabric, any(device) AS device, any(port) AS port,
       toUnixTimestamp64Milli(maxIf(ts, step = 'probation')) AS since_ms,
       argMaxIf(note, ts, step = 'probation') AS note,
       argMaxIf(toString(step), ts, startsWith(step, 'check:') AND ts >= p_ts) AS check_step,
       argMaxIf(toString(outcome), ts, startsWith(step, 'check:') AND ts >= p_ts) AS check_outcome,
       argMaxIf(after, ts, startsWith(step, 'check:') AND ts >= p_ts) AS check_after,
       countIf(startsWith(step, 'check:') AND ts >= p_ts) AS checks,
       countIf(startsWith(step, 'check:') AND ts >= p_ts AND outcome = 'failed') AS failed
FROM (SELECT a.*, p.p_ts AS p_ts
      FROM (SELECT *, arrayElement(splitByChar('/', id), -2) AS run_id FROM actions FINAL) AS a
      INNER JOIN (SELECT workflow_id, arrayElement(splitByChar('/', id), -2) AS run_id,
                         max(ts) AS p_ts
                  FROM actions FINAL WHERE step = 'probation'
                  GROUP BY workflow_id, run_id) AS p
              ON a.workflow_id = p.workflow_id AND a.run_id = p.run_id)
GROUP BY workflow_id, run_id
HAVING countIf(step IN ('return', 'outcome', 'abort') AND ts > p_ts) = 0
ORDER BY since_ms;

-- name: stale_open
-- Devices and ports that stopped reporting and have not come back (stale_open, 008).
SELECT fabric, device, port, scope, toUnixTimestamp64Milli(since) AS since_ms
FROM stale_open ORDER BY since_ms, device, port LIMIT 1000;

-- name: episodes
-- One row per detection episode in the window, its detections folded in (the first 50), and
-- the cable it is on: the port's peer in its fabric's latest topology snapshot.
SELECT d.fabric AS fabric, d.device AS device, d.port AS port, d.episode AS episode,
       d.first_ms AS first_ms, d.last_ms AS last_ms, d.n AS n, d.first_kind AS detection,
       d.first_severity AS severity, d.first_action AS action, d.incidents AS incidents,
       d.items AS items,
       t.peer_device AS peer_device, t.peer_port AS peer_port
FROM (SELECT fabric, device, port, episode,
             toUnixTimestamp64Milli(min(ts)) AS first_ms,
             toUnixTimestamp64Milli(max(ts)) AS last_ms, count() AS n,
             toString(argMin(detection, ts)) AS first_kind,
             toString(argMin(severity, ts)) AS first_severity,
             toString(argMin(action, ts)) AS first_action,
             groupUniqArrayIf(assumeNotNull(incident), incident IS NOT NULL) AS incidents,
             arraySlice(arraySort(groupArray((toUnixTimestamp64Milli(ts), toString(detection),
                        toString(severity), toString(action), id))), 1, 50) AS items
      FROM detections FINAL
      WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
      GROUP BY fabric, device, port, episode) AS d
LEFT JOIN (SELECT fabric, device, port, any(peer_device) AS peer_device, any(peer_port) AS peer_port
           FROM topology_links
           WHERE (fabric, snapshot_id) IN (SELECT fabric, argMax(snapshot_id, ts)
                                           FROM topology_snapshots GROUP BY fabric)
           GROUP BY fabric, device, port) AS t
       ON d.fabric = t.fabric AND d.device = t.device AND d.port = t.port
ORDER BY first_ms, device, port LIMIT 5000;

-- name: isolation_asks
-- The detections that asked for isolation (action isolate_port), in the window and the hour
-- before it (a runbook may isolate after a wait), by id: a runbook's first record names the
-- detection that started it.
SELECT id, fabric, device, port, toString(detection) AS detection, episode,
       toUnixTimestamp64Milli(ts) AS ts_ms
FROM detections FINAL
WHERE action = 'isolate_port'
  AND ts >= fromUnixTimestamp64Milli({since:Int64}) - INTERVAL 1 HOUR
  AND ts < fromUnixTimestamp64Milli({until:Int64});

-- name: isolation_runs
-- Each runbook run that isolated in the window: its first record (the detection that started
-- it, named in the note) and its first isolate record (done, or decided in shadow mode).
SELECT workflow_id, run_id, any(fabric) AS fabric,
       argMinIf(note, k, step = 'detection') AS start_note,
       toUnixTimestamp64Milli(minIf(ts, step = 'detection')) AS started_ms,
       toUnixTimestamp64Milli(minIf(ts, step = 'isolate' AND outcome IN ('done', 'dry_run'))) AS isolated_ms,
       argMinIf(device, k, step = 'isolate' AND outcome IN ('done', 'dry_run')) AS device,
       argMinIf(port, k, step = 'isolate' AND outcome IN ('done', 'dry_run')) AS port,
       max(dry_run) AS dry_run
FROM (SELECT *, arrayElement(splitByChar('/', id), -2) AS run_id,
             (ts, toUInt64OrZero(arrayElement(splitByChar('/', id), -1))) AS k
      FROM actions FINAL
      WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) - INTERVAL 1 HOUR
        AND ts < fromUnixTimestamp64Milli({until:Int64}))
GROUP BY workflow_id, run_id
HAVING countIf(step = 'isolate' AND outcome IN ('done', 'dry_run')
               AND ts >= fromUnixTimestamp64Milli({since:Int64})) > 0
ORDER BY isolated_ms;
