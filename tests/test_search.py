"""The search proposer: the spread, hill climbing, no repeats across restarts, exhaustion."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autokernel.kernelfile import parse_source
from autokernel.orchestrator import config_key
from autokernel.proposers import SearchExhausted, make_proposer
from autokernel.proposers.search import SearchProposer, latin_hypercube, valid_config_fn

SOURCE = '''KERNEL_TYPE = "softmax"
BACKEND = "triton"
BLOCK = 128  # rows per program
NUM_WARPS = 4
VARIANT = "a"
SEARCH_SPACE = {"BLOCK": [32, 64, 128, 256, 512], "NUM_WARPS": [1, 2, 4, 8], "VARIANT": ["a", "b", "c"]}


def valid_config(cfg):
    return cfg["BLOCK"] // cfg["NUM_WARPS"] >= 16


def kernel_fn(x):
    return x
'''
SPACE = parse_source(SOURCE).search_space


def _valid(cfg):
    return cfg["BLOCK"] // cfg["NUM_WARPS"] >= 16


def _row(cfg, status="reverted"):
    return SimpleNamespace(status=status, config_json=json.dumps(cfg))


def test_latin_hypercube_covers_every_stratum():
    import random

    pts = latin_hypercube({"A": list(range(8)), "B": list(range(8))}, 8, random.Random(1))
    assert sorted(p["A"] for p in pts) == list(range(8))
    assert sorted(p["B"] for p in pts) == list(range(8))


def test_explores_the_whole_valid_space_without_repeats_then_exhausts():
    p = SearchProposer(seed=3)
    history, seen = [], []
    while True:
        try:
            prop = p.propose(SOURCE, None, history)
        except SearchExhausted:
            break
        kf = parse_source(prop.source)
        assert kf.config == prop.config  # the file really carries the proposed values
        assert _valid(prop.config)
        assert prop.source.count("# rows per program") == 1  # comments survive the rewrite
        seen.append(config_key(prop.config))
        history.append(_row(prop.config))
    all_valid = {config_key(dict(BLOCK=b, NUM_WARPS=w, VARIANT=v)) for b in SPACE["BLOCK"]
                 for w in SPACE["NUM_WARPS"] for v in SPACE["VARIANT"] if _valid(dict(BLOCK=b, NUM_WARPS=w))}
    start = config_key(parse_source(SOURCE).config)
    assert len(seen) == len(set(seen))
    assert set(seen) == all_valid - {start}


def test_spread_first_quick_then_hill_climb_around_the_best():
    p = SearchProposer(seed=0, spread=4)
    history = []
    props = []
    for _ in range(10):
        prop = p.propose(SOURCE, None, history)
        props.append(prop)
        history.append(_row(prop.config))
    assert props[0].quick and props[0].description.startswith("spread")
    climbs = [q for q in props if q.description.startswith("hill-climb")]
    assert climbs and not any(q.quick for q in climbs)
    # one-parameter neighbours of the file's config (BLOCK 128, NUM_WARPS 4, VARIANT a) come first
    first = climbs[0].config
    base = parse_source(SOURCE).config
    assert sum(first[k] != base[k] for k in base) == 1
    changed = next(k for k in base if first[k] != base[k])
    if changed == "BLOCK":
        assert first["BLOCK"] in (64, 256)
    elif changed == "NUM_WARPS":
        assert first["NUM_WARPS"] in (2, 8)


def test_history_is_the_memory_and_abandoned_rows_are_retried_once():
    p = SearchProposer(seed=0)
    first = p.propose(SOURCE, None, [])
    # a fresh proposer (a restarted process) with the same history proposes something else
    again = SearchProposer(seed=0).propose(SOURCE, None, [_row(first.config)])
    assert again.config != first.config
    # abandoned once: no verdict, proposed again; abandoned twice: counted as tried
    assert SearchProposer(seed=0).propose(SOURCE, None, [_row(first.config, "abandoned")]).config == first.config
    twice = [_row(first.config, "abandoned"), _row(first.config, "abandoned")]
    assert SearchProposer(seed=0).propose(SOURCE, None, twice).config != first.config


def test_valid_config_runs_without_imports_or_environment():
    check = valid_config_fn(SOURCE)
    assert check({"BLOCK": 64, "NUM_WARPS": 4}) and not check({"BLOCK": 32, "NUM_WARPS": 8})
    sneaky = SOURCE.replace('return cfg["BLOCK"] // cfg["NUM_WARPS"] >= 16',
                            'import os\n    return bool(os.environ)')
    assert valid_config_fn(sneaky)({"BLOCK": 64, "NUM_WARPS": 4}) is False


def test_no_search_space_is_exhausted_and_agent_names():
    bare = SOURCE.split("SEARCH_SPACE")[0] + "\n\ndef kernel_fn(x):\n    return x\n"
    with pytest.raises(SearchExhausted):
        SearchProposer().propose(bare, None, [])
    assert make_proposer("search").name == "search"
    from autokernel.errors import ConfigError

    with pytest.raises(ConfigError):
        make_proposer("genetic")


def test_valid_config_reads_module_constants_of_every_starter():
    """valid_config may use the file's constants (SMEM_LIMIT...): each starter's own config is valid
    in the search's sandbox, and the search proposes a new configuration rather than giving up."""
    from autokernel.kernels import KERNEL_TYPES, starter_path

    checked = 0
    for kernel_type in KERNEL_TYPES:
        source = starter_path(kernel_type, "triton").read_text()
        check = valid_config_fn(source)
        if check is None:
            continue
        kf = parse_source(source)
        assert check(dict(kf.config)), kernel_type
        prop = SearchProposer(seed=0).propose(source, None, [_row(kf.config)])
        assert prop.config != kf.config and check(prop.config), kernel_type
        checked += 1
    assert checked >= 5


def test_constants_that_call_or_import_stay_out_of_the_sandbox():
    source = SOURCE.replace("def valid_config(cfg):\n    return cfg[\"BLOCK\"] // cfg[\"NUM_WARPS\"] >= 16",
                            "import os\nLIMIT = 4 * 4\nHOME = os.environ.get('HOME')\n\n\n"
                            "def valid_config(cfg):\n    return cfg['BLOCK'] // cfg['NUM_WARPS'] >= LIMIT and HOME is None")
    check = valid_config_fn(source)
    assert check({"BLOCK": 64, "NUM_WARPS": 4, "VARIANT": "a"}) is False  # HOME unknown -> invalid
    ok = valid_config_fn(source.replace(" and HOME is None", ""))
    assert ok({"BLOCK": 64, "NUM_WARPS": 4, "VARIANT": "a"}) and not ok({"BLOCK": 32, "NUM_WARPS": 4, "VARIANT": "a"})
