-- Which links hurt this job between {since} and {until}? Every cable on the job's paths
-- with a detection or a runbook isolation in the window, the cables most of the job's
-- traffic crosses first. Paths: the job's latest placement, its nodes' HCAs in the latest
-- topology snapshot, each HCA's cable to its leaf, and, on a rail whose NICs sit under more
-- than one leaf (across SUs, or a miswired NIC), those leaves' uplinks. share_pct: of the
-- job's rail-to-rail flows (NIC pairs on one rail), the part that crosses the cable, as
-- `fabricwatch job impact` computes it; spine-core cables need path counting and are only
-- in the CLI.
-- Params: fabric, job, since, until.
WITH
    (SELECT argMax(nodes, ts) FROM job_placements FINAL
     WHERE fabric = {fabric:String} AND job = {job:String}
       AND ts < {until:DateTime64(3, 'UTC')}) AS job_nodes,
    (SELECT argMax(snapshot_id, ts) FROM topology_snapshots FINAL
     WHERE fabric = {fabric:String} AND ts < {until:DateTime64(3, 'UTC')}) AS snap,
    links AS (
        SELECT device, port, peer_device, peer_port FROM topology_links FINAL
        WHERE fabric = {fabric:String} AND snapshot_id = snap
    ),
    nics AS (
        SELECT toUInt16OrZero(extract(device, '(\\d+)$')) AS rail, device AS hca,
               port AS hca_port, peer_device AS leaf, peer_port AS leaf_port
        FROM links
        WHERE position(device, '/') > 0 AND has(job_nodes, splitByChar('/', device)[1])
    ),
    rails AS (SELECT rail, count() AS n FROM nics GROUP BY rail),
    leaves AS (SELECT rail, leaf, count() AS c FROM nics GROUP BY rail, leaf),
    uplinks AS (
        SELECT device AS leaf, port, peer_device, peer_port FROM links
        WHERE device IN (SELECT leaf FROM nics) AND position(peer_device, '/') = 0
    ),
    uplink_count AS (SELECT leaf, count() AS u FROM uplinks GROUP BY leaf),
    path AS (
        SELECT nics.hca AS a, nics.hca_port AS ap, nics.leaf AS b, nics.leaf_port AS bp,
               'host' AS tier, toFloat64(2 * (rails.n - 1)) AS flows
        FROM nics INNER JOIN rails ON rails.rail = nics.rail
        WHERE rails.n > 1
        UNION ALL
        SELECT up.leaf AS a, up.port AS ap, up.peer_device AS b, up.peer_port AS bp,
               'leaf-spine' AS tier, toFloat64(2 * l.c * (r.n - l.c) / uc.u) AS flows
        FROM uplinks AS up
        INNER JOIN leaves AS l ON l.leaf = up.leaf
        INNER JOIN rails AS r ON r.rail = l.rail
        INNER JOIN uplink_count AS uc ON uc.leaf = up.leaf
        WHERE r.n > l.c
    ),
    cables AS (
        SELECT a, ap, b, bp, any(tier) AS tier,
               sum(flows) / (SELECT sum(n * (n - 1)) FROM rails) AS share,
               if((a, ap) < (b, bp),
                  concat(a, ':', toString(ap), '<->', b, ':', toString(bp)),
                  concat(b, ':', toString(bp), '<->', a, ':', toString(ap))) AS link
        FROM path GROUP BY a, ap, b, bp
    ),
    path_ends AS (
        SELECT link, tier, share, a AS device, ap AS port FROM cables
        UNION ALL
        SELECT link, tier, share, b AS device, bp AS port FROM cables
    ),
    episodes AS (
        SELECT device, port, toString(detection) AS kind, episode, min(ts) AS first_seen,
               max(ts) AS last_seen, count() AS n
        FROM detections FINAL
        WHERE fabric = {fabric:String} AND ts >= {since:DateTime64(3, 'UTC')}
          AND ts < {until:DateTime64(3, 'UTC')}
        GROUP BY device, port, detection, episode
        UNION ALL
        SELECT device, port, 'isolated' AS kind, workflow_id AS episode, min(ts) AS first_seen,
               max(ts) AS last_seen, count() AS n
        FROM actions FINAL
        WHERE fabric = {fabric:String} AND step = 'isolate' AND outcome = 'done' AND dry_run = 0
          AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
        GROUP BY device, port, workflow_id
    )
SELECT pe.link AS link,
       pe.tier AS tier,
       round(pe.share * 100, 3) AS share_pct,
       e.device AS device,
       e.port AS port,
       e.kind AS detection,
       e.first_seen AS first_seen,
       e.last_seen AS last_seen,
       e.n AS detections,
       e.episode AS episode
FROM path_ends AS pe
INNER JOIN episodes AS e ON e.device = pe.device AND e.port = pe.port
ORDER BY share_pct DESC, first_seen, device, port, detection
