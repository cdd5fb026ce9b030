-- One port's optic, hour by hour between {since} and {until}: the hottest module reading and
-- the weakest Rx power of each hour (counter_hourly, from every sample the ledger stored), and
-- how far each is from the port's first hour in the window (a module heating up or an optic
-- going dark shows as a growing rise / drop). What the optic_temp and optic_power detections
-- judged, for the analyst who asks how it got there.
-- Params: fabric, device, port, since, until.
SELECT hour,
       max_temp_c,
       min_rx_power_dbm,
       round(max_temp_c - first_value(max_temp_c) OVER w, 2) AS temp_rise_c,
       round(first_value(min_rx_power_dbm) OVER w - min_rx_power_dbm, 2) AS rx_power_drop_db,
       samples
FROM
(
    -- Float32 in storage: rounded as Float64 so every client shows the same decimals
    SELECT hour, round(toFloat64(max(max_module_temp_c)), 2) AS max_temp_c,
           round(toFloat64(min(min_rx_power_dbm)), 2) AS min_rx_power_dbm,
           sum(samples) AS samples
    FROM counter_hourly
    WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
      AND hour >= toStartOfHour({since:DateTime64(3, 'UTC')})
      AND hour < {until:DateTime64(3, 'UTC')}
    GROUP BY hour
    HAVING max_temp_c IS NOT NULL OR min_rx_power_dbm IS NOT NULL
)
WINDOW w AS (ORDER BY hour ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
ORDER BY hour
