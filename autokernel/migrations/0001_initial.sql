-- 0001: the initial schema: runs, profiles, kernels, experiments, devices, llm_calls.
CREATE TABLE devices (
	id INTEGER NOT NULL, 
	"key" VARCHAR NOT NULL, 
	name VARCHAR NOT NULL, 
	capability VARCHAR NOT NULL, 
	sm_count INTEGER NOT NULL, 
	memory_gb FLOAT NOT NULL, 
	copy_gbps FLOAT, 
	matmul_tflops_fp32 FLOAT, 
	matmul_tflops_fp16 FLOAT, 
	matmul_tflops_bf16 FLOAT, 
	torch_version VARCHAR NOT NULL, 
	triton_version VARCHAR NOT NULL, 
	measured_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);

CREATE UNIQUE INDEX ix_devices_key ON devices ("key");

CREATE TABLE runs (
	id INTEGER NOT NULL, 
	kind VARCHAR NOT NULL, 
	model VARCHAR, 
	agent VARCHAR, 
	status VARCHAR NOT NULL, 
	config_json VARCHAR NOT NULL, 
	device VARCHAR, 
	pid INTEGER, 
	created_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	notes VARCHAR, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_runs_kind ON runs (kind);
CREATE INDEX ix_runs_model ON runs (model);

CREATE TABLE profiles (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	model VARCHAR NOT NULL, 
	config_json VARCHAR NOT NULL, 
	device VARCHAR, 
	total_gpu_ms FLOAT NOT NULL, 
	forward_ms FLOAT NOT NULL, 
	entries_json VARCHAR NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);

CREATE INDEX ix_profiles_model ON profiles (model);
CREATE INDEX ix_profiles_run_id ON profiles (run_id);

CREATE TABLE kernels (
	id INTEGER NOT NULL, 
	name VARCHAR NOT NULL, 
	kernel_type VARCHAR NOT NULL, 
	backend VARCHAR NOT NULL, 
	model VARCHAR, 
	profile_id INTEGER, 
	share FLOAT NOT NULL, 
	shapes_json VARCHAR NOT NULL, 
	dtype VARCHAR NOT NULL, 
	branch VARCHAR NOT NULL, 
	base_commit VARCHAR, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(profile_id) REFERENCES profiles (id)
);

CREATE INDEX ix_kernels_kernel_type ON kernels (kernel_type);
CREATE INDEX ix_kernels_model ON kernels (model);
CREATE UNIQUE INDEX ix_kernels_name ON kernels (name);

CREATE TABLE experiments (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	kernel_id INTEGER, 
	number INTEGER NOT NULL, 
	tag VARCHAR NOT NULL, 
	kernel_type VARCHAR NOT NULL, 
	backend VARCHAR NOT NULL, 
	"commit" VARCHAR, 
	proposer VARCHAR NOT NULL, 
	description VARCHAR NOT NULL, 
	config_json VARCHAR NOT NULL, 
	status VARCHAR NOT NULL, 
	stage_smoke VARCHAR, 
	stage_shapes VARCHAR, 
	stage_stability VARCHAR, 
	stage_determinism VARCHAR, 
	stage_edge VARCHAR, 
	correctness VARCHAR, 
	latency_us FLOAT, 
	latency_iqr_us FLOAT, 
	tflops FLOAT, 
	gbps FLOAT, 
	pct_peak FLOAT, 
	speedup_vs_eager FLOAT, 
	speedup_vs_compile FLOAT, 
	eager_us FLOAT, 
	compile_us FLOAT, 
	peak_vram_mb FLOAT, 
	duration_s FLOAT, 
	flagged BOOLEAN NOT NULL, 
	device VARCHAR, 
	error VARCHAR, 
	created_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_experiments_run_number UNIQUE (run_id, number), 
	FOREIGN KEY(run_id) REFERENCES runs (id), 
	FOREIGN KEY(kernel_id) REFERENCES kernels (id)
);

CREATE INDEX ix_experiments_kernel_id ON experiments (kernel_id);
CREATE INDEX ix_experiments_run_id ON experiments (run_id);

CREATE TABLE llm_calls (
	id INTEGER NOT NULL, 
	run_id INTEGER, 
	experiment_id INTEGER, 
	provider VARCHAR NOT NULL, 
	model VARCHAR NOT NULL, 
	status VARCHAR NOT NULL, 
	http_status INTEGER, 
	attempts INTEGER NOT NULL, 
	prompt_tokens INTEGER, 
	completion_tokens INTEGER, 
	latency_s FLOAT, 
	error VARCHAR, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id), 
	FOREIGN KEY(experiment_id) REFERENCES experiments (id)
);

CREATE INDEX ix_llm_calls_run_id ON llm_calls (run_id);

