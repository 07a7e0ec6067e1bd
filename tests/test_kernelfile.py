

def test_with_config_rewrites_an_assignment_that_spans_several_lines():
    """A per-shape table written out over several lines (benchmarks/gemm_hopper.py --apply) is
    replaced whole, its trailing comment kept; single-line tunables around it as before."""
    from autokernel.kernelfile import with_config

    src = "A = 1  # a\nT = {\n    'x': 1,\n    'y': 2,\n}  # table\nB = 'z'\n"
    assert with_config(src, {"T": {"q": 3}, "A": 2, "B": "w"}) == "A = 2  # a\nT = {'q': 3}  # table\nB = 'w'\n"
