-- 0008: a near miss's back-to-back timing against the kernel's best (autokernel/paired.py), as JSON:
-- the rounds' timings, the ratio and its 99% bound, and the verdict that kept or reverted it.
ALTER TABLE experiments ADD COLUMN paired_json VARCHAR;
