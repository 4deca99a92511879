-- What each step cost: device_ms, the time its device spent on it as the
-- server counts it (since the segment's lease or its previous report), and
-- cost, that time at the device's price per hour under the experiment's
-- cost.prices (0 without a price). An experiment's spend is their sum
-- (Store::ExperimentUsage). Steps stored before this migration count 0.
ALTER TABLE measurements ADD COLUMN device_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE measurements ADD COLUMN cost REAL NOT NULL DEFAULT 0;
