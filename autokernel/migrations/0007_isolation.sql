-- 0007: what isolation the candidate had when it was judged (the sandbox, or why there was none),
-- one line per experiment, so a run on a machine without the sandbox says so on every row.
ALTER TABLE experiments ADD COLUMN isolation VARCHAR;
