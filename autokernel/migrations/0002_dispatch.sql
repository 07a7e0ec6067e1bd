-- 0002: per-shape dispatch decisions (use a kernel, or PyTorch, at a shape and mode), and the
-- per-shape timings and host wall time of each experiment they are derived from.
CREATE TABLE dispatch (
	id INTEGER NOT NULL, 
	kernel_type VARCHAR NOT NULL, 
	source_hash VARCHAR NOT NULL, 
	mode VARCHAR NOT NULL, 
	shape VARCHAR NOT NULL, 
	dtype VARCHAR NOT NULL, 
	use BOOLEAN NOT NULL, 
	kernel_ms FLOAT, 
	fallback_ms FLOAT, 
	evidence VARCHAR NOT NULL, 
	model VARCHAR, 
	workload VARCHAR, 
	device VARCHAR, 
	run_id INTEGER, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_dispatch_key UNIQUE (kernel_type, source_hash, mode, shape, dtype, evidence), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);

CREATE INDEX ix_dispatch_kernel_type ON dispatch (kernel_type);
CREATE INDEX ix_dispatch_source_hash ON dispatch (source_hash);

ALTER TABLE experiments ADD COLUMN wall_us FLOAT;
ALTER TABLE experiments ADD COLUMN details_json VARCHAR;
