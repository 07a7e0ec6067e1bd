"""The KernelBench judge child: `python -m autokernel.kb.worker`. One JSON request per line on stdin,
one JSON reply per line on its original stdout (the candidate's prints go to stderr). Runs
untrusted solution code; the parent (evaluate.KBWorker) holds the time limit.

The protocol (KernelBench's current evaluation, plus our anti-cheat):
- inputs always come from the problem file (get_inputs / get_init_inputs), never from the solution;
- the seed is set before constructing each model, so Model and ModelNew get identical weights;
- 5 correctness trials, atol = rtol = 1e-4 for fp32 outputs, 1e-2 for fp16/bf16. Every trial
  refills the same input tensors with the values of a new seed (a result cached by address
  fails); ModelNew runs first, and only then are the inputs made again and the reference Model
  built and run (kb/inputs.py): nothing it could find while it runs holds the answer. Freed
  blocks of the CUDA cache are NaN-poisoned and the candidate's torch.empty* return NaN-filled
  tensors, so an unwritten output never passes; outputs must not alias inputs, inputs must stay
  unchanged, and every accepted output is checked again after the later trials (one overwritten
  by a later call, or the same memory returned again, is refused);
- anti-cheat on every trial: ModelNew must not subclass the problem's Model or run its forward
  (kb/guards.py); it must launch kernels of its own, and library work may be at most MAX_SHARE
  of its work (GPU time, or elements under the interpreter: bench/share.py); under fp32
  tolerance, half-precision tensors handed to its own kernels are a refused precision downcast;
  anything the judge trusts (its modules, torch, the problem's Model) must be unchanged after
  each call (bench/integrity.py);
- timing (kb/timing.py): on the GPU CUDA events around each call, 3 warm-ups, 100 trials (the
  first discarded), the L2 flushed and the inputs refilled in place before every trial; the
  device is synchronized inside the timed region and work that finishes only after the current
  stream's end event (side streams) is refused; a few timed outputs are checked; eager and
  torch.compile timed live in this process, or, supplied with the request (`baselines`), timed
  by the trusted harness in a process of its own with the same functions (kb/baselines.py; used
  only when they are for this device and compile mode); speed-ups over 10x the faster of the two are re-timed and flagged. On a
  machine without a GPU: correctness as above, and CPU wall-clock timing labelled as such;
- a reference output that is constant or entirely below the tolerance marks the problem degenerate,
  as does a random one (a copy of the reference gives other values on the same inputs: dropout in
  training mode).
"""

from __future__ import annotations

import sys
import time
import traceback


TRIALS = 5
LEAD_US = 2000.0  # a warm profiled trial's lead sleep: this, plus four times the host's time per call
MAX_LEAD_US = 200_000.0
MAX_SHARE = 0.9  # KernelBench allows library ops next to one's own kernels, not instead of them


def conv_exempt(level, problem_code: str = ""):
    """What the library share leaves out on this level: on levels 2 and 3 (operator sequences and
    whole networks) a solution may keep cuDNN's convolutions and fuse the rest around them, as
    KernelBench allows; the rest of the work is held to MAX_SHARE as everywhere. On level 1 (one
    operator per problem) and for problems of unknown level, nothing: a lone convolution left to
    cuDNN beside a kernel for show is the library doing the problem. Nor where the problem itself
    has no convolution: a GEMM done as a 1x1 convolution would otherwise be exempt library work."""
    from autokernel.bench.share import is_convolution

    return is_convolution if level in (2, 3) and "conv" in problem_code.lower() else None


def library_patterns() -> tuple[str, ...]:
    from autokernel.kernels import KERNEL_TYPES, get_spec

    pats = []
    for t in KERNEL_TYPES:
        pats.extend(get_spec(t).library_kernel_patterns)
    return tuple(dict.fromkeys(pats + ["gemm", "cutlass", "cublas", "cudnn", "sm90_xmma", "ampere_", "volta_"]))


class Trial:
    """What one call of ModelNew is watched with; `why()` after it: a cheat's reason or None."""

    def __init__(self, prob, mod_name: str, launches, check, cuda: bool, profile: bool, exempt=None,
                 lead_us: float | None = None):
        from autokernel.kb.guards import DtypeSpy, ReferenceGuard

        self.exempt = exempt  # work left out of the library share (conv_exempt)
        self.guard, self.spy = ReferenceGuard(prob.Model), DtypeSpy(mod_name)
        self.mod_name, self.launches, self.check, self.cuda, self.profile = mod_name, launches, check, cuda, profile
        self.lead_us = lead_us  # a warm profiled trial's lead sleep (launches.record_gpu); None: cold
        self.host_us = 0.0  # what the call took the host to return (its launches queued, not waited for)

    def call(self, new, args):
        import contextlib

        import torch

        from autokernel.bench.checks import poisoned_empty, require_plain
        from autokernel.bench.launches import record_gpu, record_triton
        from autokernel.bench.share import TorchWork

        with contextlib.ExitStack() as stack:
            stack.enter_context(self.spy)
            stack.enter_context(record_triton(self.mod_name, self.launches))
            ended = None
            if self.cuda and self.profile:
                ended = stack.enter_context(record_gpu(self.launches, lead_us=self.lead_us))
            elif not self.cuda:
                stack.enter_context(TorchWork(self.launches.meter))
            stack.enter_context(poisoned_empty())
            stack.enter_context(torch.no_grad())
            t0 = time.perf_counter()
            with self.guard:
                out = new(*args)
                if ended is not None:
                    ended()  # the end marker, queued right behind the call's launches
            self.host_us = (time.perf_counter() - t0) * 1e6
            require_plain(out)  # before the judge touches it: a subclass runs its own code in the checks
            if self.cuda:
                torch.cuda.synchronize()
        return out

    def why(self) -> str | None:
        """Right after the call: why it is a cheat (changed the judge, ran the problem's Model, no
        kernels of its own, library work over MAX_SHARE), or None."""
        from autokernel.bench.integrity import outside_a_call
        from autokernel.bench.launches import cheat_reason, library_reason

        changed = self.check() or outside_a_call()
        if changed:
            return f"the candidate modified the judge itself ({changed})"
        why = cheat_reason(self.launches, library_patterns(), self.cuda) or self.guard.reason()
        if why:
            return f"own-kernel check: {why}"
        return library_reason(self.launches, library_patterns(), self.cuda, MAX_SHARE, self.exempt)

    def downcast(self, out_dtype) -> str | None:
        import torch

        low = sorted(str(d).replace("torch.", "") for d in self.spy.dtypes if d in (torch.float16, torch.bfloat16))
        if out_dtype == torch.float32 and low:
            return f"precision downcast: its own kernels received {', '.join(low)} tensors for an fp32 problem"
        return None


# looser than the bench's (which profiles twice before it decides): one warm trial, many kernels
WATCHED_SLACK, WATCHED_SLACK_US, WATCHED_PER_KERNEL_US = 2.0, 100.0, 2.0
# the floor's allowance: a GPU-bound timed median is the call's GPU work plus at most the host's time
# to its first launch (under half of it), and the profiler only adds, so median / 4 leaves a margin of 2
WATCHED_FLOOR_US = 20.0


def watched_reason(launches, median_us: float | None, host_us: float = 0.0) -> str | None:
    """launches.watched_reason of the warm profiled trial (a cold one compiles: not compared). The
    floor (far less work watched than timed) only where the timed calls were GPU-bound (median at
    least twice the host's time per call): KernelBench's timing brackets the call with events, so a
    host-bound model's median is its host's launch path, and its warm profiled trial, queued behind
    the lead sleep, is rightly far shorter."""
    from autokernel.bench.launches import watched_reason as watched

    warm = [s for s in launches.gpu_sessions if s.warm]
    if median_us is None or not warm:
        return None
    return watched(warm[-1], median_us, WATCHED_SLACK, WATCHED_SLACK_US, WATCHED_PER_KERNEL_US,
                   floor_us=WATCHED_FLOOR_US if median_us >= 2.0 * host_us else None)


def judge_kb(req: dict, notify=lambda m: None) -> dict:
    import hashlib
    import signal

    import torch

    from autokernel.bench import judge as bj
    from autokernel.bench.checks import (CheckFailure, check_inputs_unchanged, check_no_alias, check_structure,
                                         compare, poison_cuda_cache)
    from autokernel.bench.gpu_compile import compile_stage, record_launches
    from autokernel.bench.integrity import checker, judge_snapshot
    from autokernel.bench.introspection import refused as introspection_refused
    from autokernel.bench.introspection import start_judgement
    from autokernel.bench.launches import Launches, library_share, short_name
    from autokernel.bench.across_calls import OutputLedger, secret_int
    from autokernel.bench.between_calls import LeftBehind
    from autokernel.bench.result import CHEAT, COMPILE_ERROR, CORRECT, CRASHED, INCORRECT, BenchResult, StageVerdict
    from autokernel.errors import KernelFileError
    from autokernel.kb import guards, timing  # noqa: F401  (in the snapshot)
    from autokernel.kb.degenerate import degenerate_reason, ill_conditioned, random_reference
    from autokernel.kb.inputs import Inputs, Reference, build_model, flat, to_device, tolerance
    from autokernel.kb.problems import load_source
    from autokernel.kernelfile import import_kernel, parse_source
    from autokernel.textfmt import tail

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    timing.exact_fp32()
    env = bj.environment()
    res = BenchResult(kernel_type="kb", backend="triton", device=env.get("name", device), gpu_timing=False)
    res.extra.update(problem=req.get("problem_name"), interpreted=not cuda)
    timeout_s = float(req.get("timeout_s") or 600)
    seed = int(req.get("seed", 42))
    old = signal.signal(signal.SIGALRM, bj.on_alarm)
    stage = "load"
    restart = False
    recording = None
    deadline = time.monotonic() + timeout_s

    def cheat(why: str) -> dict:
        res.stages.append(StageVerdict("smoke", "fail", why[:300]))
        res.outcome, res.error = CHEAT, why
        return {"result": res.to_dict(), "restart": "modified the judge" in why}

    try:
        bj.arm(timeout_s)
        code = req["problem_code"]
        exempt = conv_exempt(req.get("level"), code)  # work the library share leaves out
        prob = load_source(code, "kb_problem_" + hashlib.sha256(code.encode()).hexdigest()[:16])
        # the check is made before the candidate is imported and held only here (integrity.checker)
        check = checker(judge_snapshot(extra_modules=[prob]))
        kf = parse_source(req["source"])
        start_judgement()  # from here on, no frame, gc walk or ctypes for the candidate's code
        mod = import_kernel(kf)
        if not isinstance(getattr(mod, "ModelNew", None), type):
            raise KernelFileError("the solution defines no class ModelNew")
        changed = check()
        if changed:
            return cheat(f"the candidate modified the judge itself ({changed})")
        if issubclass(mod.ModelNew, prob.Model):
            return cheat("ModelNew subclasses the problem's own Model class (the reference is not a solution)")
        init = [to_device(a, device) for a in prob.get_init_inputs()]
        stage = "construct"
        new = build_model(mod.ModelNew, init, device, seed)
        stage = "correctness"
        launches = Launches()
        ledger = OutputLedger(keep=TRIALS)
        max_abs = max_rel = 0.0
        degenerate = out_dtype = None
        sizes: list[int] = []
        host_us = 0.0  # the slowest host time of an unprofiled trial's call (not the first, which compiles)
        if req.get("gpu_compile") and not cuda:  # the interpreter runs what the GPU compiler may reject
            recording = record_launches()
            recording.__enter__()
        # the inputs' seeds are the judge's secret (the weights' seed is KernelBench's): seeds a
        # candidate can read in the judge's code would let it compute every trial's answer ahead
        secret = secret_int(4)
        trial_inputs = Inputs(prob, device, secret)
        reference = Reference(prob, init, device, seed)
        for trial in range(TRIALS):
            changed = check()  # a finalizer hung on an earlier output runs when the judge lets go of it
            if changed:
                return cheat(f"the candidate modified the judge itself ({changed})")
            args = trial_inputs.refill(trial)  # the same tensors every trial, new values
            if cuda:
                poison_cuda_cache(sizes or [a.numel() * a.element_size() for a in args
                                            if isinstance(a, torch.Tensor)], device)
            # the first trial profiled cold (it compiles), the last warm behind a lead sleep that
            # covers several times the host's time of the calls before it
            watch = Trial(prob, mod.__name__, launches, check, cuda, profile=trial in (0, TRIALS - 1),
                          exempt=exempt, lead_us=(min(MAX_LEAD_US, LEAD_US + 4 * host_us)
                                                  if trial == TRIALS - 1 and trial > 0 else None))
            outs = None

            def earlier(n=trial):  # the earlier trials' inputs, made again: a stateful reference replays them
                return (trial_inputs.made(s) for s in range(n))
            try:
                out = watch.call(new, args)
                if trial > 0 and not watch.profile:  # the timed calls' host time (the profiler's adds)
                    host_us = max(host_us, watch.host_us)
                if trial == 0:
                    res.launched_kernels = [short_name(n) for n in launches.names()][:20]
                why = watch.why()  # before its values are even looked at
                if why:
                    return cheat(why)
                check_no_alias([o for o in flat(out) if isinstance(o, torch.Tensor)], args)
                fresh = trial_inputs.made(trial)  # after the call: the inputs again, then the reference
                check_inputs_unchanged(fresh, args)
                exact = reference.outputs(fresh, earlier)
                floats = [t for t in flat(exact) if isinstance(t, torch.Tensor) and t.is_floating_point()]
                out_dtype = floats[0].dtype if floats else torch.float32
                why = watch.downcast(out_dtype)
                if why:
                    return cheat(why)
                atol, rtol = tolerance(out_dtype)
                if trial == 0:
                    degenerate = degenerate_reason(flat(exact), atol, rtol)
                    if degenerate is None:
                        # inputs made again: a reference may have written into `fresh`
                        degenerate = random_reference(prob, init, device, seed, trial_inputs.made(trial),
                                                      flat(exact), atol, rtol)
                    res.extra["degenerate"] = degenerate
                outs = check_structure(out, exact, device)
                ledger.recheck(outs)
                a, r = compare(outs, exact, atol, rtol)
                max_abs, max_rel = max(max_abs, a), max(max_rel, r)
                ledger.accept(f"trial {trial + 1}", outs)
            except CheckFailure as exc:
                res.stages.append(StageVerdict("smoke", "fail", f"trial {trial + 1}/{TRIALS}: {exc}"))
                res.outcome, res.error = INCORRECT, f"correctness trial {trial + 1}/{TRIALS}: {exc}"
                if degenerate is None and outs is not None:  # values compared and missed
                    degenerate = ill_conditioned(reference, trial_inputs.made(trial), earlier, flat(exact),
                                                 atol, rtol)
                res.extra["degenerate"] = degenerate
                return {"result": res.to_dict(), "restart": False}
            sizes = [t.numel() * t.element_size() for t in flat(exact) if isinstance(t, torch.Tensor)]
            del out, outs, exact, fresh
        res.stages.append(StageVerdict("smoke", "pass", f"{TRIALS} trials on fresh inputs", max_abs, max_rel))
        res.extra["library_share"] = round(
            library_share(launches, library_patterns(), cuda, exempt)[0], 4)
        res.extra.update(degenerate=degenerate, max_abs_err=max_abs, max_rel_err=max_rel,
                         dtype=str(out_dtype).replace("torch.", ""))
        res.dtype = str(out_dtype).replace("torch.", "")
        if recording is not None:
            stage = "gpu-compile"
            # KernelBench runs ModelNew eagerly: how Inductor would type its floats does not apply
            if not compile_stage(recording, res, deadline, as_compiled=False):
                return {"result": res.to_dict(), "restart": False}
        res.outcome = CORRECT
        bj.disarm()
        if req.get("timing", True):
            stage = "timing"
            supplied, refused = timing.checked_supplied(req.get("baselines"), env)
            if refused:
                res.extra["baselines_refused"] = refused
            def verify(check=check, tampered=bj.Tampered) -> None:
                changed = check()
                if changed:
                    raise tampered(f"the candidate modified the judge itself ({changed})")

            try:
                why = timing.time_model(res, prob, init, new, seed, code, bool(req.get("quick")), deadline, notify,
                                        cuda, stateful=bool(reference.stateful), supplied=supplied, verify=verify,
                                        input_seed=secret + 7919)
            except (bj.Tampered, LeftBehind) as exc:  # what it left stays in this process: a new worker
                bj.disarm()
                verdict = cheat(f"timing: {exc}")
                verdict["restart"] = True
                return verdict
            changed = check()
            if why or changed:
                return cheat(f"timing: {why or f'the candidate modified the judge itself ({changed})'}")
            why = watched_reason(launches, res.latency_us if res.gpu_timing else None, host_us)
            if why:
                return cheat(f"timing: {why}")
    except BaseException as exc:
        bj.disarm()
        if isinstance(exc, KeyboardInterrupt):
            raise
        outcome, restart = bj.classify(exc)
        root = bj.root_cause(exc)
        res.outcome = outcome if outcome != CORRECT else CRASHED
        looked = introspection_refused()  # the refusal it did not catch is why it crashed
        if looked:
            res.stages.append(StageVerdict("smoke", "fail", looked[:300]))
            res.outcome, res.error, restart = CHEAT, f"the candidate modified the judge itself ({looked})", True
        elif isinstance(root, KernelFileError):
            res.outcome, res.error = COMPILE_ERROR, root.one_line()
        elif isinstance(root, bj.StageTimeout):
            res.error = f"{stage}: exceeded its time limit ({timeout_s:.0f} s)"
        else:
            res.error = tail(f"{stage}: " + "".join(traceback.format_exception(root)), bj.ERROR_CHARS)
    finally:
        restart = bj.end_judgement(old, cuda, recording, empty_cache=True) or restart
    return {"result": res.to_dict(), "restart": restart}


def main() -> int:
    from autokernel.bench.worker import serve

    return serve({"kb": lambda req, send: judge_kb(req, notify=send)})


if __name__ == "__main__":
    sys.exit(main())
