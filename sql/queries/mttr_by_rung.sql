-- How long does a repair take, by the ladder rung that fixed it? For every return to
-- service between {since} and {until}: time from the port's isolation (the last done
-- `isolate` of the same workflow before it) to the done `return`, grouped by the last done
-- `ladder:<rung>` step between the two ('none' when it came back without a ladder step).
-- Params: fabric, since, until.
SELECT rung,
       count() AS repairs,
       round(avg(hours), 2) AS mttr_hours,
       round(quantileExact(0.5)(hours), 2) AS median_hours,
       round(max(hours), 2) AS worst_hours
FROM
(
    SELECT r.workflow_id AS workflow_id,
           dateDiff('second', i.ts, r.ts) / 3600 AS hours,
           if(l.ts >= i.ts AND l.step != '', replaceOne(l.step, 'ladder:', ''), 'none') AS rung
    FROM
    (
        SELECT workflow_id, ts FROM actions FINAL
        WHERE fabric = {fabric:String} AND step = 'return' AND outcome = 'done' AND dry_run = 0
          AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    ) AS r
    ASOF JOIN
    (
        SELECT workflow_id, ts FROM actions FINAL
        WHERE fabric = {fabric:String} AND step = 'isolate' AND outcome = 'done' AND dry_run = 0
    ) AS i ON r.workflow_id = i.workflow_id AND r.ts >= i.ts
    ASOF LEFT JOIN
    (
        SELECT workflow_id, ts, toString(step) AS step FROM actions FINAL
        WHERE fabric = {fabric:String} AND startsWith(step, 'ladder:') AND outcome = 'done'
          AND dry_run = 0
    ) AS l ON r.workflow_id = l.workflow_id AND r.ts >= l.ts
)
GROUP BY rung
ORDER BY mttr_hours
