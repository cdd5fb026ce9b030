-- Which miswires are still open? A miswire detection stays open until the cabling of its
-- port changes: its peer in the latest topology snapshot differs from its peer in the
-- snapshot the detection was made against (the last one at or before it), or a runbook
-- returned the port to service after it. A port absent from the latest snapshot (cable
-- pulled mid-repair) is still open. Oldest first.
-- Params: fabric.
SELECT d.device AS device,
       d.port AS port,
       d.episode AS episode,
       d.first_seen AS first_seen,
       d.last_seen AS last_seen,
       round(dateDiff('second', d.first_seen, now64(3, 'UTC')) / 3600, 2) AS hours_open,
       if(t_then.peer_device = '', NULL, concat(t_then.peer_device, ':', toString(t_then.peer_port))) AS peer_at_detection,
       if(t_now.peer_device = '', NULL, concat(t_now.peer_device, ':', toString(t_now.peer_port))) AS peer_now,
       d.evidence AS evidence
FROM
(
    SELECT fabric, device, port, episode, min(ts) AS first_seen, max(ts) AS last_seen,
           argMax(evidence, ts) AS evidence
    FROM detections FINAL
    WHERE fabric = {fabric:String} AND detection = 'miswire'
    GROUP BY fabric, device, port, episode
) AS d
ASOF LEFT JOIN
(
    SELECT fabric, snapshot_id, ts FROM topology_snapshots FINAL WHERE fabric = {fabric:String}
) AS s ON d.fabric = s.fabric AND d.last_seen >= s.ts
LEFT JOIN
(
    SELECT snapshot_id, device, port, peer_device, peer_port
    FROM topology_links FINAL WHERE fabric = {fabric:String}
) AS t_then ON t_then.snapshot_id = s.snapshot_id AND t_then.device = d.device
    AND t_then.port = d.port
LEFT JOIN
(
    SELECT device, port, peer_device, peer_port
    FROM topology_links FINAL
    WHERE fabric = {fabric:String}
      AND snapshot_id = (SELECT argMax(snapshot_id, ts) FROM topology_snapshots FINAL
                         WHERE fabric = {fabric:String})
) AS t_now ON t_now.device = d.device AND t_now.port = d.port
LEFT JOIN
(
    SELECT device, port, max(ts) AS returned_at
    FROM actions FINAL
    WHERE fabric = {fabric:String} AND step = 'return' AND outcome = 'done' AND dry_run = 0
    GROUP BY device, port
) AS r ON r.device = d.device AND r.port = d.port
WHERE (t_now.peer_device = '' OR t_then.peer_device = ''
       OR (t_now.peer_device = t_then.peer_device AND t_now.peer_port = t_then.peer_port))
  AND r.returned_at <= d.last_seen
ORDER BY first_seen, device, port
