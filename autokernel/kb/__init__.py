"""KernelBench: load problems (a local checkout, the HF dataset from the local cache, or the
autokernel sample problems), judge ModelNew solutions under KernelBench's protocol plus our
anti-cheat, run the optimization loop on them (`kb run`) and score the results (`kb score`).

The bridge: problems (loading, sources), evaluate (parent side of the judge worker), worker (child
side: protocol, anti-cheat, timing), runner (`kb run` on the loop's machinery), score (fast_p,
geomean, export). The compiler of a problem's starting ModelNew: trace (torch.fx on meta shapes),
the *_rewrites modules, the rules (op_rules: the library starters' through each kernel type's
kb_rules.py in its folder, elementwise: the EW table, pattern_rules: generated kernels), fusion,
and solutions (emit), which writes templates/*.py and the types' kb_helper.py into one
self-contained file. Library code: never prints.
"""
