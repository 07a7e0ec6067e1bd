"""The search proposer: an Optuna study over numbers and structure, no repeats across restarts,
infeasible configurations never compiled, exhaustion."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from autokernel.kernelfile import parse_source, with_config
from autokernel.orchestrator import config_key
from autokernel.proposers import SearchExhausted, make_proposer
from autokernel.proposers.search import SearchProposer, near_untried, valid_config_fn

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


def _row(cfg, status="reverted", latency=100.0, run_id=1, device="gpu0", error=None, screen_us=None):
    # timed at one shape, the heaviest (a screened row: at it alone, screen_us)
    details = json.dumps([{"shape": {"rows": 8}, "latency_us": latency}]) if status != "screened" else None
    return SimpleNamespace(status=status, config_json=json.dumps(cfg), run_id=run_id, latency_us=latency,
                           details_json=details, screen_us=screen_us, device=device, error=error)


def _baseline(source=SOURCE):
    return _row(parse_source(source).config, status="baseline")


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


def test_the_study_learns_where_the_good_configurations_are():
    """After its random start, TPE proposes near the configurations the history scored well:
    a synthetic objective (fast at BLOCK 512 with VARIANT c) pulls the proposals there."""
    def latency(cfg):
        return 100.0 * (1 + abs(SPACE["BLOCK"].index(cfg["BLOCK"]) - 4)) * (1 if cfg["VARIANT"] == "c" else 3)

    p = SearchProposer(seed=1, startup=6, local=0)
    history = [_baseline()]
    history[0].latency_us = latency(parse_source(SOURCE).config)
    best = dict(parse_source(SOURCE).config)
    for _ in range(16):
        prop = p.propose(with_config(SOURCE, best), None, history)  # the loop hands over its best
        history.append(_row(prop.config, latency=latency(prop.config)))
        best = min(best, prop.config, key=latency)
    # 20 of the 51 valid points are within 3x of the best: a random draw finds ~4 in 10
    after_start = [h.latency_us for h in history[7:]]
    assert sum(t <= 300 for t in after_start) >= 7, [(json.loads(h.config_json), h.latency_us) for h in history]
    assert min(after_start) == 100.0  # the best point of the 51
    assert prop.description.startswith(("tpe #", "near #", "draw #"))


def test_the_study_scores_repeats_of_the_best_as_infeasible_and_each_card_by_its_own_start():
    """A candidate the screen found to run the best's very program is no evidence for its
    configuration: scored as the best, such rows filled TPE's good group with clones of the best
    (H100 run 9: 422 of matmul's 772 candidates). It is infeasible, below every feasible trial and
    above a failure. A run resumed on another card timed its start again there: each row is
    scored against the start timed on its own card, never across cards."""
    from autokernel.proposers import study as studies
    from autokernel.screening import SAME_PROGRAM

    start = parse_source(SOURCE).config
    names = list(start)
    history = [_baseline(),  # the start, timed on gpu0 at 100 us, then on gpu1 at 200 us
               _row(dict(start, BLOCK=64), latency=90.0),
               _row(dict(start, BLOCK=256), status="screened", screen_us=101.0,
                    error=f"{SAME_PROGRAM} at all 1 model shapes: not judged again"),
               _row(dict(start, BLOCK=512), status="screened", screen_us=150.0, error="slower than 1.15x the best"),
               _row(dict(start, NUM_WARPS=8), status="incorrect"),
               _row(start, status="baseline", latency=200.0, device="gpu1"),
               _row(dict(start, VARIANT="b"), latency=180.0, device="gpu1"),
               _row(dict(start, VARIANT="c"), latency=50.0, device="gpu2")]  # no start on gpu2
    study = studies.open_study("t", None, seed=0, startup=4)
    studies.sync(study, history, SPACE, names, start)
    by_block = {(t.params["BLOCK"], t.params["NUM_WARPS"], t.params["VARIANT"]): t for t in study.get_trials()}

    def trial(**moved):
        cfg = dict(start, **moved)
        return by_block[(SPACE["BLOCK"].index(cfg["BLOCK"]), SPACE["NUM_WARPS"].index(cfg["NUM_WARPS"]),
                         cfg["VARIANT"])]

    assert trial(BLOCK=64).value == pytest.approx(math.log(0.9)) and trial(BLOCK=64).constraints == {"failed": 0.0}
    assert trial(BLOCK=512).value == pytest.approx(math.log(1.5)) and trial(BLOCK=512).constraints == {"failed": 0.0}
    assert trial(BLOCK=256).constraints == {"failed": studies.REPEAT} and 0 < studies.REPEAT < studies.INFEASIBLE
    assert trial(NUM_WARPS=8).constraints == {"failed": studies.INFEASIBLE}
    assert trial(VARIANT="b").value == pytest.approx(math.log(0.9))  # 180 against gpu1's 200, not gpu0's 100
    assert ("c" not in {t.params["VARIANT"] for t in study.get_trials()}), "scored without a start on its card"
    # TPE's split: the repeat is never in the good group while a feasible trial can fill it
    from optuna.samplers._tpe.sampler import _split_trials

    below, above = _split_trials(study, study.get_trials(), n_below=3)
    assert trial(BLOCK=256).number in {t.number for t in above}
    assert {t.number for t in below} == {trial(BLOCK=64).number, trial(VARIANT="b").number, trial().number}


def test_structural_switches_are_searched_and_named():
    source = SOURCE.replace('VARIANT = "a"\n', 'VARIANT = "a"\nSTRUCTURAL = ["VARIANT"]\n')
    p = SearchProposer(seed=0)
    history = [_baseline(source)]
    variants = set()
    for _ in range(12):
        prop = p.propose(source, None, history)
        variants.add(prop.config["VARIANT"])
        if prop.config["VARIANT"] != "a":
            assert "structure VARIANT=" in prop.description
        history.append(_row(prop.config))
    assert variants == {"a", "b", "c"}


def _moved(start: dict, cfg: dict) -> list[str]:
    return [k for k in start if start[k] != cfg[k]]


def test_the_first_proposals_are_the_incumbents_ring_then_the_study():
    """A tuned start's gains are one step away: the first proposals move one tunable each (a
    number to its neighbour in the list, a structural switch to each other value), structural and
    numeric moves alternating, never an invalid one; once the ring is tried, TPE samples freely."""
    source = SOURCE.replace('VARIANT = "a"\n', 'VARIANT = "a"\nSTRUCTURAL = ["VARIANT"]\n')
    start = parse_source(source).config  # BLOCK 128, NUM_WARPS 4, VARIANT a
    p = SearchProposer(seed=0)
    history, props = [_baseline(source)], []
    for _ in range(8):
        prop = p.propose(source, None, history)
        props.append(prop)
        history.append(_row(prop.config))
    ring = [prop.config for prop in props[:6]]
    assert all(prop.description.startswith("ring #") for prop in props[:6])
    assert all(len(_moved(start, cfg)) == 1 for cfg in ring)
    assert {config_key(cfg) for cfg in ring} == {config_key(dict(start, **move)) for move in (
        {"BLOCK": 64}, {"BLOCK": 256}, {"NUM_WARPS": 2}, {"NUM_WARPS": 8}, {"VARIANT": "b"}, {"VARIANT": "c"})}
    kinds = [_moved(start, cfg)[0] == "VARIANT" for cfg in ring]
    assert kinds[:4] in ([True, False, True, False], [False, True, False, True])  # alternating while both last
    assert "structure VARIANT=" in next(p.description for p in props[:6] if p.config["VARIANT"] != "a")
    assert all(prop.description.startswith(("tpe #", "near #", "draw #")) for prop in props[6:])

    # a keep moves the incumbent: the next ring is around the kept configuration (never back to
    # a configuration judged before); NUM_WARPS 8 at BLOCK 64 is invalid and never proposed
    kept = with_config(source, {"BLOCK": 64})
    nxt = p.propose(kept, None, history)
    assert nxt.description.startswith("ring #")
    assert _moved(dict(start, BLOCK=64), nxt.config) and len(_moved(dict(start, BLOCK=64), nxt.config)) == 1
    seen = set()
    for _ in range(5):
        prop = p.propose(kept, None, history)
        if not prop.description.startswith("ring #"):
            break
        assert _valid(prop.config) and config_key(prop.config) not in seen
        seen.add(config_key(prop.config))
        history.append(_row(prop.config))


def test_the_ring_is_closed_after_local_members_and_off_with_zero():
    p = SearchProposer(seed=0, local=2)
    history = [_baseline()]
    descriptions = []
    for _ in range(4):
        prop = p.propose(SOURCE, None, history)
        descriptions.append(prop.description.split(" #")[0])
        history.append(_row(prop.config))
    assert descriptions == ["ring", "ring", "tpe", "tpe"]
    assert not SearchProposer(seed=0, local=0).propose(SOURCE, None, [_baseline()]).description.startswith("ring")
    # a pool's batch takes ring members first, each once
    batch = SearchProposer(seed=0).propose(SOURCE, None, [_baseline()], kernel=SimpleNamespace(
        batch=3, max_candidates=None, dtype="bfloat16", name="softmax", run_id=None))
    assert [b.description.split(" #")[0] for b in batch] == ["ring"] * 3
    assert len({config_key(b.config) for b in batch}) == 3


def test_a_ring_trial_left_waiting_by_a_killed_process_is_asked_past(tmp_path):
    """A process killed between enqueuing a ring member and asking for it leaves a waiting trial
    in the studies file; the next process's ring trial is recorded with its own parameters."""
    from autokernel.proposers import study as studies

    path = tmp_path / "studies.journal"
    first = SearchProposer(seed=0, study_path=path).propose(SOURCE, None, [_baseline()])
    names = list(parse_source(SOURCE).config)
    name = studies.study_name("softmax", "bfloat16", SPACE, names)  # the proposer's study for SOURCE
    stale = studies.open_study(name, path, 0, 8)
    stale.enqueue_trial(studies.encode(SPACE, dict(parse_source(SOURCE).config, BLOCK=512), names))
    p = SearchProposer(seed=0, study_path=path)
    prop = p.propose(SOURCE, None, [_baseline(), _row(first.config)])
    assert prop.description.startswith("ring #")
    trial = next(t for t in studies.open_study(name, path, 0, 8).get_trials() if t.number == p.last_trial)
    assert studies.decode(SPACE, trial.params) == {n: prop.config[n] for n in names}


def test_ring_members_outside_the_declared_space_are_left_out():
    from autokernel.proposers.search import ring_of

    space = {"A": [1, 2, 4], "B": ["x", "y"], "C": [16, 32]}
    ring = ring_of({"A": 2, "B": "x", "C": 48}, space, ["A", "B", "C"], ["B"], seed=1)
    # C's value is not declared: it is not moved, and no member carrying it can be encoded
    assert ring == []
    ring = ring_of({"A": 1, "B": "x", "C": 32}, space, ["A", "B", "C"], ["B"], seed=1)
    assert sorted(map(str, ring)) == sorted(map(str, [{"A": 2, "B": "x", "C": 32}, {"A": 1, "B": "y", "C": 32},
                                                      {"A": 1, "B": "x", "C": 16}]))
    assert ring[0] == {"A": 1, "B": "y", "C": 32}  # the structural move leads
    assert ring == ring_of({"A": 1, "B": "x", "C": 32}, space, ["A", "B", "C"], ["B"], seed=1)


def test_structural_moves_come_in_the_files_structural_order():
    """The file's STRUCTURAL order is its author's priority: KernelBench's fp32 GEMM starts list
    FP32_PRECISION first, so a -k 3 search tries 3xTF32 in its first experiment."""
    from autokernel.proposers.search import ring_of

    space = {"P": ["ieee", "tf32x3"], "L": ["copy", "as_is"], "V": ["pointer", "persistent"], "K": [16, 32, 64]}
    start = {"P": "ieee", "L": "copy", "V": "pointer", "K": 32}
    for seed in range(5):
        ring = ring_of(start, space, list(space), ["P", "L", "V"], seed=seed)
        assert [next(n for n in cfg if cfg[n] != start[n]) for cfg in ring[0::2][:3]] == ["P", "L", "V"]
        assert {cfg["K"] for cfg in ring[1::2]} == {16, 64}
    ring = ring_of(start, space, list(space), ["V", "P", "L"], seed=0)
    assert ring[0] == dict(start, V="persistent")


def test_invalid_for_the_device_is_rejected_before_compiling():
    """A tiling whose pipelined tiles cannot fit in shared memory (or whose accumulator cannot fit
    in registers) is never proposed: the study is told it is infeasible."""
    from autokernel.declared import fits_device

    assert fits_device({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "NUM_STAGES": 5, "NUM_WARPS": 8},
                       "bfloat16") is not None
    assert "registers" in fits_device({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "NUM_STAGES": 2,
                                       "NUM_WARPS": 4}, "bfloat16")
    assert fits_device({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_STAGES": 3, "NUM_WARPS": 8},
                       "bfloat16") is None
    source = SOURCE.replace("BLOCK = 128  # rows per program", "BLOCK_M = 128\nBLOCK_N = 128\nBLOCK_K = 64")
    source = source.replace('SEARCH_SPACE = {"BLOCK": [32, 64, 128, 256, 512], ',
                            'SEARCH_SPACE = {"BLOCK_M": [128, 256], "BLOCK_N": [128, 256], "BLOCK_K": [64, 256], ')
    source = source.replace('cfg["BLOCK"] // cfg["NUM_WARPS"] >= 16', "True")
    p = SearchProposer(seed=0)
    history = [_baseline(source)]
    while True:
        try:
            prop = p.propose(source, None, history)
        except SearchExhausted:
            break
        assert fits_device(prop.config, "bfloat16") is None, prop.config
        history.append(_row(prop.config))
    assert p.rejected["softmax"] > 0
    assert len(history) > 10


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


def test_the_study_resumes_after_kill_9(home):
    """A process searching a kernel is killed with SIGKILL mid-run; the next one continues the
    same study from the journal file under the home: every trial kept, the killed one's running
    trial settled, numbering continued, and no configuration judged twice across both."""
    import os
    import signal
    import subprocess
    import sys

    import optuna

    from akfixtures import ROOT, pythonpath
    from autokernel.store import Store
    from support.search_worker import latency

    store = Store(home.db)
    (home.home / "kernel.py").write_text(SOURCE)
    k = store.add_kernel("m.softmax", "softmax", model="m", dtype="float32")
    run = store.create_run("loop", model="m")
    start = parse_source(SOURCE).config
    store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="softmax", status="baseline", proposer="baseline",
                         latency_us=latency(start), config_json=json.dumps(start))
    env = dict(os.environ, PYTHONPATH=pythonpath(ROOT))
    cmd = [sys.executable, str(ROOT / "tests" / "support" / "search_worker.py"), str(home.home), k.name]
    proc = subprocess.Popen(cmd + ["40"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(8):
            assert proc.stdout.readline().strip(), "the search worker stopped early"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    from autokernel.proposers import study as studies

    storage = studies.journal_storage(home.studies)
    (name,) = optuna.study.get_all_study_names(storage)
    before = {t.number: t.params for t in optuna.load_study(study_name=name, storage=storage).trials}
    judged_before = [e for e in store.list_experiments(run_id=run.id) if e.status == "reverted"]
    assert len(judged_before) >= 8 and len(before) >= len(judged_before)

    done = subprocess.run(cmd + ["14"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name=name, storage=studies.journal_storage(home.studies))
    after = {t.number: t for t in study.trials}
    assert all(after[n].params == p for n, p in before.items())  # nothing lost, same numbers
    assert len(after) > len(before)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING][:-1]  # at most the last
    rows = [e for e in store.list_experiments(run_id=run.id) if e.status == "reverted"]
    keys = [config_key(json.loads(e.config_json)) for e in rows]
    assert len(rows) == 14 and len(set(keys)) == 14 and config_key(start) not in keys
    complete = {t.user_attrs.get("key") for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE}
    assert set(keys[:-1]) <= complete  # every verdict but the last one is known to the study


def test_a_damaged_journal_is_cut_or_set_aside_and_the_search_goes_on(tmp_path):
    """The journal is a cache of the store's verdicts: a torn last line (a crash inside a write) is
    cut off and the trials before it stay; a file Optuna cannot read is kept aside as .damaged and
    the study is rebuilt from the store's rows, with no configuration proposed twice."""
    from autokernel.proposers import study as studies

    path = tmp_path / "studies.journal"
    history = [_baseline()]
    for _ in range(5):
        prop = SearchProposer(seed=0, study_path=path).propose(SOURCE, None, history)
        history.append(_row(prop.config, latency=90.0 + len(history)))
    names = list(parse_source(SOURCE).config)
    name = studies.study_name("softmax", "bfloat16", SPACE, names)

    def trials():
        return studies.open_study(name, path, 0, 8).get_trials()

    before = {t.number: t.params for t in trials()}
    assert len(before) >= 5
    with open(path, "ab") as f:
        f.write(b'{"op_code":5,"worker_id":"x","trial_id":')  # torn: no end of line
    prop = SearchProposer(seed=0, study_path=path).propose(SOURCE, None, history)
    assert {n: p for n, p in ((t.number, t.params) for t in trials()) if n in before} == before
    assert path.read_bytes().endswith(b"\n") and not (tmp_path / "studies.journal.damaged").exists()
    history.append(_row(prop.config, latency=97.0))

    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]) + b"not json\n" + b"".join(lines[3:]))
    prop = SearchProposer(seed=0, study_path=path).propose(SOURCE, None, history)
    assert (tmp_path / "studies.journal.damaged").read_bytes().count(b"not json") == 1
    rebuilt = [t for t in trials() if t.user_attrs.get("source") == "store"]
    assert len(rebuilt) == len(history)  # the start and every judged row, from the store
    judged = {config_key(json.loads(r.config_json)) for r in history}
    assert config_key(prop.config) not in judged


def test_the_files_declared_functions_get_a_namespace_each_and_parsed_files_a_copy_each():
    """Both are cached by source (the search asks them of the same best at every proposal): what a
    caller or a function does to its copy must not reach the next caller."""
    from autokernel.declared import declared_function

    counting = SOURCE.replace('def valid_config(cfg):\n    return cfg["BLOCK"] // cfg["NUM_WARPS"] >= 16',
                              'SEEN = []\n\n\ndef valid_config(cfg):\n    SEEN.append(1)\n    return len(SEEN)')
    assert [declared_function(counting, "valid_config")({}) for _ in range(3)] == [1, 1, 1]
    fn = declared_function(counting, "valid_config")
    assert [fn({}) for _ in range(3)] == [1, 2, 3]  # one function keeps its own globals
    kf = parse_source(SOURCE)
    kf.config["BLOCK"] = 1
    kf.search_space["BLOCK"].append(1024)
    again = parse_source(SOURCE)
    assert again.config["BLOCK"] == 128 and again.search_space["BLOCK"] == [32, 64, 128, 256, 512]


def test_a_missing_optuna_is_one_clear_error_before_any_work(monkeypatch, tmp_path):
    # sys.modules[name] = None makes `import optuna` fail as it does on a machine without it
    monkeypatch.setitem(__import__("sys").modules, "optuna", None)
    from autokernel.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        SearchProposer(study_path=tmp_path / "studies.journal")
    line = info.value.one_line()
    assert "needs Optuna" in line and "wheels.sh optuna" in line and "\n" not in line


def _moves(a: dict, b: dict) -> int:
    return sum(a[k] != b[k] for k in a)


def test_near_untried_walks_out_from_the_incumbent_one_move_then_two():
    start = parse_source(SOURCE).config  # BLOCK 128, NUM_WARPS 4, VARIANT a
    names = list(SPACE)

    def accept_untried(tried):
        return lambda cfg: config_key(cfg) not in tried and _valid(cfg)

    tried = {config_key(start)}
    first = near_untried(start, SPACE, names, [], tried, accept_untried(tried), seed=0)
    assert _moves(start, first) == 1 and _valid(first)
    # every one-move neighbour tried: a two-move one, never further, never an invalid one
    ones = [dict(start, **{n: v}) for n in names for v in SPACE[n] if v != start[n]]
    tried |= {config_key(c) for c in ones}
    for seed in range(5):
        cfg = near_untried(start, SPACE, names, [], tried, accept_untried(tried), seed)
        assert _moves(start, cfg) == 2 and _valid(cfg) and config_key(cfg) not in tried
    # an ordered number moves one step in its list: BLOCK 128 -> 64 or 256, never 32 or 512
    twos = set()
    while (cfg := near_untried(start, SPACE, names, [], tried, accept_untried(tried), 0)) is not None:
        twos.add(config_key(cfg))
        tried.add(config_key(cfg))
        assert cfg["BLOCK"] in (64, 128, 256) and cfg["NUM_WARPS"] in (2, 4, 8)
    assert len(twos) >= 8  # 2 BLOCK x 2 NUM_WARPS steps, and each of them with VARIANT b or c (where valid)


def test_a_study_that_repeats_itself_falls_back_to_the_incumbents_neighbourhood():
    """When the study only re-proposes judged points (TPE converged, or a space nearly done: their
    FAIL teaches it nothing), the untried point it gets is next to the incumbent while one is left
    there ("near"), and drawn from anywhere ("draw") only after that."""
    kept = with_config(SOURCE, {"BLOCK": 512, "NUM_WARPS": 8, "VARIANT": "c"})
    incumbent = parse_source(kept).config
    near = [{"BLOCK": 256, "NUM_WARPS": 8, "VARIANT": "c"}, {"BLOCK": 512, "NUM_WARPS": 4, "VARIANT": "b"}]
    far = [{"BLOCK": 32, "NUM_WARPS": 1, "VARIANT": "a"}, {"BLOCK": 64, "NUM_WARPS": 2, "VARIANT": "b"}]
    untried = {config_key(c) for c in near + far}
    everything = [dict(BLOCK=b, NUM_WARPS=w, VARIANT=v) for b in SPACE["BLOCK"] for w in SPACE["NUM_WARPS"]
                  for v in SPACE["VARIANT"] if _valid(dict(BLOCK=b, NUM_WARPS=w))]
    history = [_baseline(kept)] + [_row(c, latency=500.0) for c in everything
                                   if config_key(c) not in untried and c != incumbent]
    history[0].latency_us = 10.0
    p = SearchProposer(seed=2, startup=2, local=0)
    got = []
    while True:
        try:
            prop = p.propose(kept, None, history)
        except SearchExhausted:
            break
        got.append((prop.description.split(" #")[0], config_key(prop.config)))
        history.append(_row(prop.config, latency=500.0))
    assert {key for _how, key in got} == untried
    near_keys = {config_key(c) for c in near}
    left = set(near_keys)
    for how, key in got:
        assert how != "draw" or not left, got  # no draw from anywhere while a neighbour is untried
        assert how != "near" or key in near_keys, got
        left.discard(key)
    assert any(how == "near" for how, _key in got), got


def test_a_configuration_is_what_its_own_values_make_the_kernel_read():
    """A file whose effective_config depends on the values (fused_mlp reads GU_ORDER only where
    GU_VARIANT is "persistent"): two configurations that differ only in what their own values leave
    unread are one candidate to the search, as they are to the loop's key. An H100 run set fused_mlp
    aside after three proposals the loop had judged before: the search took its tunables from the
    persistent incumbent. Here the search proposes each distinct candidate once, then is exhausted."""
    from autokernel.declared import effective_fn
    from autokernel.kernels import starter_path
    from autokernel.screening import key_of

    fused = starter_path("fused_mlp", "triton").read_text()
    part = effective_fn(fused, "bfloat16", [{"tokens": 2048, "hidden": 4096, "ffn": 11008}])
    start = parse_source(fused).config
    assert "GU_ORDER" in part(start) and "GU_ORDER" not in part(dict(start, GU_VARIANT="pointer"))

    source = SOURCE.replace('VARIANT = "a"\n', 'VARIANT = "a"\nORDER = "x"\n').replace(
        '"VARIANT": ["a", "b", "c"]}', '"VARIANT": ["a", "b"], "ORDER": ["x", "y", "z"]}').replace(
        "def kernel_fn(x):", "def effective_config(cfg, dtype):\n    return {k: v for k, v in cfg.items() if "
        "k != \"ORDER\" or cfg[\"VARIANT\"] == \"a\"}\n\n\ndef kernel_fn(x):")
    kf = parse_source(source)
    history = [_row(kf.config, status="baseline")]
    keys = {key_of(source, "bfloat16")}
    proposer = SearchProposer(seed=0)
    with pytest.raises(SearchExhausted):
        for _ in range(200):
            prop = proposer.propose(source, None, history)
            key = key_of(prop.source, "bfloat16")
            assert key not in keys, prop.description
            keys.add(key)
            history.append(_row(prop.config, latency=120.0))
    # valid (BLOCK // NUM_WARPS >= 16): 2+3+4+4+4 = 17 (BLOCK, NUM_WARPS) pairs; VARIANT "a" x 3 ORDERs,
    # "b" x 1: 4 candidates each
    assert len(keys) == 17 * 4
