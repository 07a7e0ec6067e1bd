-- 0006: one judge per GPU (issue 25). A pooled session's judges (a bench worker pinned to one GPU, a
-- CPU worker, or a Ray actor), each with its span, busy time and restarts, and the judge of each
-- experiment: the report's throughput per GPU and idle time, and a pooled run's wall-clock budget.
CREATE TABLE judges (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	slot INTEGER NOT NULL, 
	label VARCHAR NOT NULL, 
	device VARCHAR, 
	host VARCHAR NOT NULL, 
	pid INTEGER, 
	started_at DATETIME NOT NULL, 
	last_seen_at DATETIME, 
	busy_s FLOAT NOT NULL, 
	judged INTEGER NOT NULL, 
	restarts INTEGER NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
CREATE INDEX ix_judges_run_id ON judges (run_id);
ALTER TABLE experiments ADD COLUMN judge_id INTEGER REFERENCES judges (id);
