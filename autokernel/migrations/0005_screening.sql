-- 0005: cheap screening and the search's memory. A candidate's identity (a hash of its effective
-- configuration and the rest of its source: the same key is never judged twice), and, for a
-- candidate screened at its kernel's heaviest model shape, its short timing there and the best's
-- time at the same shape (a candidate stopped by the screen has status "screened").
ALTER TABLE experiments ADD COLUMN candidate_key VARCHAR;
ALTER TABLE experiments ADD COLUMN screen_us FLOAT;
ALTER TABLE experiments ADD COLUMN screen_best_us FLOAT;
CREATE INDEX ix_experiments_candidate_key ON experiments (candidate_key);
