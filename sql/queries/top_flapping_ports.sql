-- Which ports flapped most between {since} and {until}?
-- Link downs per port (traps and port events; replayed events counted once via FINAL),
-- with the first and last down of the window and whether the port is isolated now.
-- Params: fabric, since, until, limit.
SELECT e.device AS device,
       e.port AS port,
       count() AS downs,
       min(e.ts) AS first_down,
       max(e.ts) AS last_down,
       any(s.isolated) AS isolated_now
FROM port_events AS e FINAL
LEFT JOIN
(
    SELECT device, port, argMaxMerge(isolated) AS isolated
    FROM port_state
    WHERE fabric = {fabric:String}
    GROUP BY device, port
) AS s ON s.device = e.device AND s.port = e.port
WHERE e.fabric = {fabric:String}
  AND e.state = 'down'
  AND e.ts >= {since:DateTime64(3, 'UTC')}
  AND e.ts < {until:DateTime64(3, 'UTC')}
GROUP BY e.device, e.port
ORDER BY downs DESC, last_down DESC, device, port
LIMIT {limit:UInt32}
