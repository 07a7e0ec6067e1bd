"""The store's tables. Plain values only (str, float, int, JSON text): the store never imports torch.

Every column here must also be created by a migration in autokernel/migrations/; a test compares the
migrated schema against this metadata.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from sqlalchemy import UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Run(SQLModel, table=True):
    __tablename__ = "runs"

    id: Optional[int] = Field(default=None, primary_key=True)
    kind: str = Field(index=True)  # loop | bench | kb | verify
    model: Optional[str] = Field(default=None, index=True)
    agent: Optional[str] = None
    status: str = "running"  # running | finished | interrupted | failed
    config_json: str = "{}"
    device: Optional[str] = None
    pid: Optional[int] = None
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: Optional[datetime] = None
    notes: Optional[str] = None


class Profile(SQLModel, table=True):
    __tablename__ = "profiles"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id", index=True)
    model: str = Field(index=True)
    config_json: str = "{}"  # batch, seq, dtype, device
    device: Optional[str] = None
    total_gpu_ms: float = 0.0  # GPU time attributed per forward pass
    forward_ms: float = 0.0  # measured wall time of one forward pass
    entries_json: str = "[]"  # ranked list of entries: type, share, calls, shapes, dtypes, amdahl
    created_at: datetime = Field(default_factory=utcnow)


class Kernel(SQLModel, table=True):
    __tablename__ = "kernels"

    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)  # e.g. "llama-7b.rmsnorm" or "kb.L1.19"
    kernel_type: str = Field(index=True)
    backend: str = "triton"  # triton | cuda
    model: Optional[str] = Field(default=None, index=True)
    profile_id: Optional[int] = Field(default=None, foreign_key="profiles.id")
    share: float = 0.0  # fraction of the model's GPU time spent in this kernel
    shapes_json: str = "[]"  # the model's real shapes, as the spec's shape dicts
    dtype: str = "bfloat16"
    branch: str = ""
    base_commit: Optional[str] = None
    created_at: datetime = Field(default_factory=utcnow)


class Experiment(SQLModel, table=True):
    __tablename__ = "experiments"
    # The number is what users and results.tsv call an experiment; a resumed run must not reuse one.
    __table_args__ = (UniqueConstraint("run_id", "number", name="uq_experiments_run_number"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id", index=True)
    kernel_id: Optional[int] = Field(default=None, foreign_key="kernels.id", index=True)
    number: int = 0  # 1, 2, ... within the run
    tag: str = ""  # short label, e.g. "softmax-e12"
    kernel_type: str = ""
    backend: str = "triton"
    commit: Optional[str] = None
    proposer: str = "manual"  # baseline | search | llm | manual
    description: str = ""
    config_json: str = "{}"  # the tunables' values of this candidate
    # running | kept | reverted | screened (stopped by the screen) | incorrect | crashed | timeout | abandoned | baseline
    status: str = "running"
    stage_smoke: Optional[str] = None  # pass | fail | skip
    stage_shapes: Optional[str] = None
    stage_stability: Optional[str] = None
    stage_determinism: Optional[str] = None
    stage_edge: Optional[str] = None
    correctness: Optional[str] = None  # PASS | FAIL | ERROR
    latency_us: Optional[float] = None  # median
    latency_iqr_us: Optional[float] = None
    tflops: Optional[float] = None
    gbps: Optional[float] = None
    pct_peak: Optional[float] = None  # % of the measured ceiling that bounds this kernel
    speedup_vs_eager: Optional[float] = None
    speedup_vs_compile: Optional[float] = None
    eager_us: Optional[float] = None
    compile_us: Optional[float] = None
    peak_vram_mb: Optional[float] = None
    duration_s: Optional[float] = None
    flagged: bool = False  # too good to be true (bench.result.too_good): for review, not trusted
    device: Optional[str] = None
    error: Optional[str] = None  # tail of the error for crashed/timeout/incorrect
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: Optional[datetime] = None
    # host wall time per call when calls are issued back to back (what a model in eager mode sees)
    wall_us: Optional[float] = None
    details_json: Optional[str] = None  # per-shape timings: [{shape, dtype, latency_us, eager_us, ...}]
    llm_call_id: Optional[int] = None  # the llm_calls row whose answer this candidate is
    # sha256 of the effective configuration and the rest of the source (kernelfile.candidate_key):
    # a key judged once is never judged again for the kernel
    candidate_key: Optional[str] = Field(default=None, index=True)
    screen_us: Optional[float] = None  # short timing at the kernel's heaviest model shape (the screen)
    screen_best_us: Optional[float] = None  # the best version's time at that shape, when it was screened
    # the judge (one worker on one GPU, in one session of the run) that judged it; None: the run's
    # own single bench worker (a loop without --gpus/--workers/--ray)
    judge_id: Optional[int] = Field(default=None, foreign_key="judges.id")
    isolation: Optional[str] = None  # the judge's sandbox line, or "none: ..." when the candidate ran without
    # a near miss's back-to-back timing against the best (paired.py: rounds, ratio, bound, verdict)
    paired_json: Optional[str] = None


class Judge(SQLModel, table=True):
    """One judge of a pooled session (autokernel/pool.py): a bench worker pinned to one GPU (or a CPU
    worker, or a Ray actor). The coordinator writes it: started when the pool starts, last_seen and
    busy_s after each judgement, so a kill -9 leaves an honest span; the report's throughput, idle
    time and the run's wall-clock budget come from these rows."""

    __tablename__ = "judges"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id", index=True)
    slot: int = 0  # its place in the pool (0..N-1)
    label: str = ""  # "gpu 3", "cpu 1", "ray gpu 0 on host"
    device: Optional[str] = None  # what its timings are: the GPU's name, or the CPU interpreter
    host: str = ""
    pid: Optional[int] = None  # its worker process now (the bench worker locally, the actor on Ray)
    started_at: datetime = Field(default_factory=utcnow)
    last_seen_at: Optional[datetime] = None  # its last judgement's end (the session's end for it)
    busy_s: float = 0.0  # seconds spent judging (candidates, starting points, its own references)
    judged: int = 0  # judgements it returned (candidates and starting points)
    restarts: int = 0  # its worker process started again after dying (the candidate it held: failed)


class Dispatch(SQLModel, table=True):
    """Whether to use a kernel (one type, one source) at one shape and mode, and the evidence."""

    __tablename__ = "dispatch"
    __table_args__ = (UniqueConstraint("kernel_type", "source_hash", "mode", "shape", "dtype", "evidence",
                                       name="uq_dispatch_key"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    kernel_type: str = Field(index=True)
    source_hash: str = Field(index=True)
    mode: str  # eager | compile
    shape: str  # the spec's shape label
    dtype: str
    use: bool
    kernel_ms: Optional[float] = None
    fallback_ms: Optional[float] = None
    evidence: str = "model"  # model (verify at a workload) | bench (per-shape op timing)
    model: Optional[str] = None
    workload: Optional[str] = None
    device: Optional[str] = None
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id")
    created_at: datetime = Field(default_factory=utcnow)


class Device(SQLModel, table=True):
    __tablename__ = "devices"

    id: Optional[int] = Field(default=None, primary_key=True)
    key: str = Field(index=True, unique=True)  # name + capability + torch version
    name: str = ""
    capability: str = ""
    sm_count: int = 0
    memory_gb: float = 0.0
    copy_gbps: Optional[float] = None  # measured device copy, bytes read + written
    matmul_tflops_fp32: Optional[float] = None
    matmul_tflops_fp16: Optional[float] = None
    matmul_tflops_bf16: Optional[float] = None
    torch_version: str = ""
    triton_version: str = ""
    measured_at: datetime = Field(default_factory=utcnow)


class LLMCall(SQLModel, table=True):
    __tablename__ = "llm_calls"

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id", index=True)
    experiment_id: Optional[int] = Field(default=None, foreign_key="experiments.id")
    provider: str = ""  # openai | anthropic
    model: str = ""
    # ok | endpoint: http_error, timeout, too_long, bad_reply, fatal, interrupted | answer: no_code,
    # ambiguous, edit_failed, truncated, unchanged, syntax_error, too_large
    status: str = "ok"
    http_status: Optional[int] = None
    attempts: int = 1
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    latency_s: Optional[float] = None  # waiting on the endpoint, retries included: counts toward the run's time
    error: Optional[str] = None  # redacted
    created_at: datetime = Field(default_factory=utcnow)
    kernel_id: Optional[int] = Field(default=None, foreign_key="kernels.id", index=True)
    finish_reason: Optional[str] = None  # stop | length | end_turn | max_tokens... (comma-joined for n > 1)
    prompt_sha: Optional[str] = None  # sha256 of system + user message, first 16 hex digits
    prompt_gz: Optional[bytes] = None  # zlib of the prompt text (store.llm_call_texts reads it)
    reply_gz: Optional[bytes] = None  # zlib of the reply text(s)
    cost_usd: Optional[float] = None  # None when the model has no configured price
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    candidates: int = 1  # choices asked for in this call


class Lock(SQLModel, table=True):
    """One writer per run: the row names the process that holds `key` (pid, host and start time,
    so a reused pid is not mistaken for it). A row whose process is gone (kill -9) is taken over."""

    __tablename__ = "locks"

    key: str = Field(primary_key=True)  # "loop:<model>" | "kb:<model key>"
    pid: int
    host: str = ""
    start: Optional[str] = None  # the holder's start time in clock ticks (Linux), else NULL
    run_id: Optional[int] = Field(default=None, foreign_key="runs.id")
    acquired_at: datetime = Field(default_factory=utcnow)
