"""KernelBench: load problems (a local checkout, the HF dataset from the local cache, or the
autokernel sample problems), judge ModelNew solutions under KernelBench's protocol plus our
anti-cheat, run the optimization loop on them (`kb run`) and score the results (`kb score`).

Module map: problems (loading, sources), solutions (initial ModelNew from the kernel library),
evaluate (parent side: the judge worker), worker (child side: protocol, anti-cheat, timing),
runner (`kb run` on the loop's machinery), score (fast_p, geomean, export).
Library code: never prints.
"""
