-- Are probes on some rail slower than their baseline? Per rail and probe kind between
-- {since} and {until}: bandwidth against the baseline, and how many runs fell below
-- {threshold} of it (policy: 0.9). A probe's baseline is its own baseline_gbps when the
-- collector gave one, else the 90th percentile of all rails' runs of the same probe and
-- message size in the window (the fabric's best is the baseline a healthy rail meets).
-- Worst rail first.
-- Params: fabric, since, until, threshold.
SELECT rail,
       probe,
       count() AS runs,
       round(avg(bw_gbps), 2) AS avg_gbps,
       round(avg(baseline), 2) AS baseline_gbps,
       round(avg(bw_gbps / baseline), 3) AS ratio,
       countIf(bw_gbps < {threshold:Float64} * baseline) AS below_threshold,
       round(min(bw_gbps), 2) AS worst_gbps
FROM
(
    SELECT rail, probe, bw_gbps,
           greatest(coalesce(baseline_gbps,
                             quantileExact(0.9)(bw_gbps) OVER (PARTITION BY probe, size_bytes)),
                    1e-9) AS baseline
    FROM probes FINAL
    WHERE fabric = {fabric:String}
      AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
)
GROUP BY rail, probe
ORDER BY ratio, rail, probe
