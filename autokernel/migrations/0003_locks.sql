-- 0003: one writer per run: a row per held lock, naming the holding process (pid, host, start time).
CREATE TABLE locks (
	"key" VARCHAR NOT NULL, 
	pid INTEGER NOT NULL, 
	host VARCHAR NOT NULL, 
	start VARCHAR, 
	run_id INTEGER, 
	acquired_at DATETIME NOT NULL, 
	PRIMARY KEY ("key"), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
