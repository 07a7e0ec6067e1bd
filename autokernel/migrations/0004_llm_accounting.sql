-- LLM accountability: each call's kernel, finish reason, the prompt's hash, prompt and reply text
-- (zlib-compressed), its cost and request parameters; experiments name the call they came from
-- (several experiments share one call when it returned several candidates).
ALTER TABLE llm_calls ADD COLUMN kernel_id INTEGER REFERENCES kernels (id);
ALTER TABLE llm_calls ADD COLUMN finish_reason VARCHAR;
ALTER TABLE llm_calls ADD COLUMN prompt_sha VARCHAR;
ALTER TABLE llm_calls ADD COLUMN prompt_gz BLOB;
ALTER TABLE llm_calls ADD COLUMN reply_gz BLOB;
ALTER TABLE llm_calls ADD COLUMN cost_usd FLOAT;
ALTER TABLE llm_calls ADD COLUMN max_tokens INTEGER;
ALTER TABLE llm_calls ADD COLUMN temperature FLOAT;
ALTER TABLE llm_calls ADD COLUMN candidates INTEGER NOT NULL DEFAULT 1;
CREATE INDEX ix_llm_calls_kernel_id ON llm_calls (kernel_id);
ALTER TABLE experiments ADD COLUMN llm_call_id INTEGER;
