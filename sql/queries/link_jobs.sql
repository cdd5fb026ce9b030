-- Which running jobs does the cable at {device}:{port} carry? What an operator checks
-- before isolating it. A host cable carries the jobs on its node; a leaf's cable to a
-- spine carries the jobs with NICs under that leaf whose rail also has NICs under another
-- leaf (their traffic leaves the leaf). Jobs by their latest placement, running now (an
-- active state; a finished job until its end). Cables between spines and cores are only in
-- `fabricwatch link jobs`, which counts paths.
-- Params: fabric, device, port.
WITH
    (SELECT argMax(snapshot_id, ts) FROM topology_snapshots FINAL
     WHERE fabric = {fabric:String}) AS snap,
    links AS (
        SELECT device, port, peer_device, peer_port FROM topology_links FINAL
        WHERE fabric = {fabric:String} AND snapshot_id = snap
    ),
    cable AS (
        SELECT device, port, peer_device, peer_port FROM links
        WHERE device = {device:String} AND port = {port:UInt16}
    ),
    jobs AS (
        SELECT job, argMax(nodes, ts) AS nodes, argMax(state, ts) AS state,
               argMax(end, ts) AS job_end, argMax(gpus_per_node, ts) AS gpus_per_node
        FROM job_placements FINAL
        WHERE fabric = {fabric:String}
        GROUP BY job
        HAVING state IN ('running', 'completing', 'configuring', 'suspended', 'stage_out',
                         'resizing', 'signaling')
            OR (state NOT IN ('pending') AND job_end > now64(3, 'UTC'))
    ),
    nics AS (
        SELECT jobs.job AS job, toUInt16OrZero(extract(links.device, '(\\d+)$')) AS rail,
               links.device AS hca, links.peer_device AS leaf
        FROM links
        INNER JOIN jobs ON has(jobs.nodes, splitByChar('/', links.device)[1])
        WHERE position(links.device, '/') > 0
    ),
    leaving AS (
        SELECT job, leaf FROM nics
        WHERE (job, rail) IN (SELECT job, rail FROM nics GROUP BY job, rail
                              HAVING uniqExact(leaf) > 1)
        GROUP BY job, leaf
    )
SELECT j.job AS job, length(j.nodes) AS nodes,
       j.gpus_per_node * length(j.nodes) AS gpus, j.state AS state, why
FROM
(
    -- a host cable: the jobs on its node
    SELECT nics.job AS job, 'its node runs the job' AS why FROM nics
    WHERE (nics.hca, nics.leaf) IN (SELECT device, peer_device FROM cable
                                    UNION ALL SELECT peer_device, device FROM cable)
    UNION ALL
    -- a leaf uplink: the jobs whose rails leave that leaf
    SELECT leaving.job AS job, 'its rail traffic leaves the leaf' AS why FROM leaving
    WHERE leaving.leaf IN (SELECT device FROM cable UNION ALL SELECT peer_device FROM cable)
      AND (SELECT count() FROM cable WHERE position(device, '/') = 0
                                       AND position(peer_device, '/') = 0) > 0
) AS hit
INNER JOIN jobs AS j ON j.job = hit.job
GROUP BY j.job, j.nodes, j.gpus_per_node, j.state, why
ORDER BY gpus DESC, job
