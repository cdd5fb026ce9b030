-- 006: a rolled-back isolation ends the port's isolated state.
--
-- An aborted runbook rolls its isolation back with a done `unisolate` action (the return
-- to service is `return`); 004's view counted only `isolate` and `return`, so an aborted
-- port stayed "isolated" in port_state and the isolated_ports query. The view is
-- recreated with `unisolate` as an un-isolating step; rows already in port_state keep the
-- state they had (re-insert the port's actions to recompute one).
DROP VIEW IF EXISTS mv_port_state_actions;

CREATE MATERIALIZED VIEW IF NOT EXISTS mv_port_state_actions TO port_state AS
SELECT fabric, device, port,
       argMaxStateIf(toUInt8(step = 'isolate'), ts,
                     outcome = 'done' AND dry_run = 0
                     AND step IN ('isolate', 'return', 'unisolate')) AS isolated,
       maxIf(ts, outcome = 'done' AND dry_run = 0 AND step = 'isolate') AS isolated_since,
       maxIf(ts, outcome = 'done' AND dry_run = 0) AS last_action_ts,
       argMaxStateIf(toString(step), ts, outcome = 'done' AND dry_run = 0) AS last_action,
       argMaxStateIf(JSONExtractString(ifNull(after, '{}'), 'optic_serial'), ts,
                     JSONExtractString(ifNull(after, '{}'), 'optic_serial') != '') AS optic_serial
FROM actions
GROUP BY fabric, device, port;
