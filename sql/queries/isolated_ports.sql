-- Which ports are isolated right now, since when, for how long, and by which runbook?
-- Isolation state is the runbook's last done isolate / return action (port_state, kept by
-- mv_port_state_actions; shadow-mode actions do not count). Longest isolated first.
-- Params: fabric.
SELECT s.device AS device,
       s.port AS port,
       s.isolated_since AS isolated_since,
       round(dateDiff('second', s.isolated_since, now64(3, 'UTC')) / 3600, 2) AS hours_isolated,
       s.last_action AS last_action,
       a.workflow_id AS workflow_id,
       a.actor AS isolated_by
FROM
(
    SELECT device, port,
           argMaxMerge(isolated) AS iso,
           max(isolated_since) AS isolated_since,
           argMaxMerge(last_action) AS last_action
    FROM port_state
    WHERE fabric = {fabric:String}
    GROUP BY device, port
) AS s
LEFT JOIN
(
    SELECT device, port, argMax(workflow_id, ts) AS workflow_id, argMax(actor, ts) AS actor
    FROM actions FINAL
    WHERE fabric = {fabric:String} AND step = 'isolate' AND outcome = 'done' AND dry_run = 0
    GROUP BY device, port
) AS a ON a.device = s.device AND a.port = s.port
WHERE s.iso = 1
ORDER BY isolated_since, device, port
