"""Automatic phases for PyTorch: installed when (and if) the job imports torch.

- forward / eval: a call of a root model (a module with parameters, called from outside any other
  module). It is eval when gradients are off, in inference mode, or when the model is in eval mode.
  An evaluation as the loop writes it is one eval phase: from ``model.eval()`` on a model that has
  trained (a root seen in a training forward) to ``model.train()`` (``Module.train`` is wrapped;
  the outermost call decides), or to the next training phase where the mode is set back some
  other way (Lightning sets ``training`` itself); the model's calls inside it are not phases of
  their own. What the evaluation makes around the model's calls (metrics, figures, the logits
  kept) is the eval's. A model that never trained (a teacher, an inference job) has its calls.
  Roots are found with global forward hooks until the optimizers' cycle is known (the second
  optimizer step of a loop with one, see below); from then on only the roots are observed, so the
  cost does not grow with the model: through the call that ``Module.__call__`` makes first
  (``_compiled_call_impl``, which pickles and copies leave out; around the compiled call of a
  model compiled with ``module.compile()``), because any hook on a module takes its call off
  torch's fast path (~9 µs a call); with hooks on it where that cannot be (an older torch, a
  class with its own ``__call__``). The hooks do nothing while torch
  compiles (a hook inside a compiled region would break its graph, and a ``fullgraph`` compile
  with it), nor does the call around a root where a compiled function calls it. A model that
  ``module.compile()`` compiled runs its call compiled whole, where no hook of the probe runs: it
  is observed around its compiled call from the compile on, and is a root where it is called
  outside any other root (``torch.compile(model)``'s wrapper is found by the hooks).
- backward: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped, and
  ``torch.autograd.grad`` where it is called outside a forward and a backward.
  No global backward hooks: they break in-place operations.
- optimizer: the optimizer step pre and post hooks. An optimizer step's end ends a training step;
  where several optimizers step in turn (two for one model's parts, a GAN's discriminator and
  generator, an optimizer that wraps another), the last of their cycle ends it (``_ends_step``:
  learned at the first one's second step, each of the first cycle ending one until then; an
  optimizer not in the cycle starts the learning again).

What a backward frees of what the forwards before it saved for it (their activations) is measured
on a sample of steps (``_SAVES_EVERY``): while such a forward runs, a saved-tensors hook notes
each saved storage (weakly); when the backward ends, the storages it freed are summed and sent
(``tm2 B``). A backward frees the forward's activations and makes gradients; without this number
the analysis could not tell a backward that keeps what it made from a forward that kept its own.

Which steps are observed (``_decide_observed``, at each training step's end): as
``TIDEMARK_OBSERVE_ONE_IN`` says, ``auto`` where the job's environment does not have it (``1``:
every step). With ``N`` (≥ 2) or ``auto``: every step of the first ``_OBSERVE_FIRST``, every one that
measures saved tensors, and of the others one in N; ``auto`` chooses N such that observing takes at
most ``_OBSERVED_SHARE`` of the job's time (a step of 48 ms or more on the host: every one).
Observing a step costs about ``_OBSERVED_STEP_NS`` (its edges, their lines, the collector taking
them, sharing the job's CPU), which a loop of 4 ms steps would feel at every step, plus what reading
the allocator's numbers took at its edges (a GPU's statistics, measured at each observed step).
Evals are observed always. On a step that is not observed the call around a root, the backward
wrapper and the optimizer hooks return after one check, keeping only the begin time:
where that phase raises (an out-of-memory error), its two edges are sent then, so that the error
is put in its phase. Each run of steps not observed is sent (``tm2 U``) when observing resumes,
and at exit.
"""
import importlib.abc
import math
import sys
import threading
import time
import weakref

import tidemark

_roots = weakref.WeakValueDictionary()  # id -> root model (weak: the probe must not keep one alive)
_optimizers = []                        # weak references to the optimizers seen stepping
_measured_step = None                   # the step whose start was last measured
_local = threading.local()  # the module nesting depth, per thread
_get_ident = threading.get_ident
_monotonic_ns = time.monotonic_ns
_global_handles = []
_discovering = True
_StorageWeakRef = None  # torch's weak reference to a storage, once torch is loaded
_always_call = True     # whether a forward that raises still runs the post hook (torch ≥ 2.1)
_calls_observable = False  # whether roots are observed through `_compiled_call_impl` (`_install`)
_observed = {}          # id -> (weak reference to a model observed by its call, that call, the
                        # compiled call it wraps or None, whether it is a root only where no
                        # root is open: a compiled model not found as a root)
_is_compiling = None    # torch.compiler.is_dynamo_compiling (is_compiling), once torch is loaded

_OBSERVE_FIRST = 100        # the first steps are all observed (a short job is judged with them all) …
_OBSERVED_SHARE = 0.0025    # … then observing may take this share of the job's time …
_OBSERVED_STEP_NS = 120_000  # … at what observing a step costs (a loop of 4 ms steps: 1 in 12)
_OBSERVE_EVERY_MOST = 100   # (at least one step in this many)
_observing = True           # whether this step's phases are observed
_one_in = 1                 # TIDEMARK_OBSERVE_ONE_IN: one step in this many (1: all; 0: `auto`)
_steps_ended = 0            # optimizer steps seen
_step_ended_ns = None       # when the last one ended
_countdown = 0              # steps not observed before the next one that is
_unobserved = None          # [since_ns, first step, steps]: the run of steps not observed now
_step_began = False         # whether the step decided last began (a forward or an optimizer step)
_not_observed = 0           # steps not observed, in all
_silent_optimizer = None    # the begin time of an optimizer step that is not observed, running
_trained = weakref.WeakValueDictionary()  # id -> a root seen in a training forward
_evaluating = False         # whether an evaluation (``model.eval()`` … ``model.train()``) is open
_mode_depth = 0             # ``Module.train`` calls running (it calls its children's)


def install_when_torch_is_imported():
    global _one_in
    import atexit
    import os

    one_in = os.environ.get("TIDEMARK_OBSERVE_ONE_IN", "auto").strip()
    if one_in == "auto":
        _one_in = 0
    elif one_in.isdigit() and int(one_in) > 0:
        _one_in = int(one_in)
    else:
        _one_in = 1
        print(f"tidemark: TIDEMARK_OBSERVE_ONE_IN={one_in!r} is neither a whole number ≥ 1 nor auto: "
              "observing every step", file=sys.stderr)

    atexit.register(_at_exit)  # (before the batch's last flush: exit handlers run last in, first out)
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds torch with the finders after it (whichever knows it: the path, an editable install,
    a zip), and runs the installer once torch has loaded."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, path, target)
            except Exception:
                continue
            if spec is not None:
                break
        if spec is None:
            return None  # torch is not installed: Python raises its usual error
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            print(
                f"tidemark: torch is loaded by {type(loader).__name__}, which tidemark cannot hook: "
                "no automatic phases (mark them with tidemark.phase)",
                file=sys.stderr,
            )
            return spec

        def exec_then_install(module):
            exec_module(module)
            try:
                _install(module)
            except Exception as error:
                print(f"tidemark: automatic phases not installed: {error!r}", file=sys.stderr)

        loader.exec_module = exec_then_install
        return spec


def _install(torch):
    global _StorageWeakRef
    tidemark._torch = torch
    cuda = getattr(torch, "cuda", None)
    if isinstance(getattr(cuda, "_initialized", None), bool):
        tidemark._cuda = cuda
    try:
        from torch.multiprocessing.reductions import StorageWeakRef as _StorageWeakRef
    except Exception:
        _StorageWeakRef = None
    if tidemark._step is None:
        tidemark._step = 0
    global _calls_observable, _is_compiling
    _calls_observable = _calls_can_be_observed(torch)
    compiler = getattr(torch, "compiler", None)
    # Whether dynamo traces the code that asks (`is_compiling` where this torch has no
    # `is_dynamo_compiling`: one call more).
    _is_compiling = (getattr(compiler, "is_dynamo_compiling", None) or getattr(compiler, "is_compiling", None)
                     or (lambda: False))
    from torch.nn.modules import module as nn_module

    _global_handles.append(nn_module.register_module_forward_pre_hook(_global_pre))
    # always_call: a forward that raises still closes its nesting level and its phase.
    global _always_call
    try:
        post = nn_module.register_module_forward_hook(_global_post, always_call=True)
    except TypeError:  # torch < 2.1
        post = nn_module.register_module_forward_hook(_global_post)
        _always_call = False
    _global_handles.append(post)
    if _calls_observable:
        _compiles_observed(torch.nn.Module)
    _modes_observed(torch.nn.Module)

    torch.autograd.backward = _as_backward(torch.autograd.backward)

    grad = torch.autograd.grad
    grad_as_backward = _as_backward(grad)

    def grad_in_phase(*args, **kwargs):
        # Gradients made by `torch.autograd.grad` outside any forward (a loop that assigns
        # `p.grad` itself, a gradient penalty before the loss' backward) are a backward. Inside a
        # forward (derivatives a model's forward takes) or a backward (reentrant checkpointing)
        # they belong to that phase.
        if _in_backward[0] > 0 or _in_forward():
            return grad(*args, **kwargs)
        return grad_as_backward(*args, **kwargs)

    torch.autograd.grad = grad_in_phase

    from torch.optim import optimizer

    optimizer.register_optimizer_step_pre_hook(_optimizer_pre)
    optimizer.register_optimizer_step_post_hook(_optimizer_post)


_in_backward = [0]  # backwards running now, in any thread (the engine's threads run nested ones)


def _as_backward(run):
    """`run` (``torch.autograd.backward`` or ``grad``) made a backward phase, with what it freed of
    the forwards' saved tensors."""

    def in_phase(*args, **kwargs):
        if _evaluating:
            _end_evaluation()
        if not _observing:
            began = _monotonic_ns()
            _in_backward[0] += 1
            try:
                return run(*args, **kwargs)
            except BaseException:
                _late_phase("backward", began)
                raise
            finally:
                _in_backward[0] -= 1
        if tidemark._sock is not None:  # (tidemark.begin, one call less: it runs at every step)
            tidemark._edge("b", "backward")
        saved = _saved_before_backward() if _saved else None
        _in_backward[0] += 1
        try:
            return run(*args, **kwargs)
        finally:
            _in_backward[0] -= 1
            if saved:
                _send_saved_freed(saved)
            if tidemark._sock is not None:
                tidemark._edge("e", "backward")

    in_phase.__doc__ = run.__doc__
    in_phase.__wrapped__ = run
    return in_phase


def _in_forward():
    """Whether a root model's forward (or eval) is running in this thread."""
    me = threading.get_ident()
    return any(thread == me for _, thread in list(_open))


def _is_model(module):
    for _ in module.parameters():
        return True
    return False


def _global_pre(module, args):
    if _is_compiling():  # a module called inside a compiled region: not the probe's business
        return
    try:
        depth = getattr(_local, "depth", 0)
        if depth == 0 and (id(module) in _roots or _is_model(module)):
            _roots[id(module)] = module
            _root_pre(module, args)
        _local.depth = depth + 1
    except Exception:
        pass  # never into the job


def _global_post(module, args, output):
    if _is_compiling():
        return
    try:
        depth = max(getattr(_local, "depth", 0) - 1, 0)
        _local.depth = depth
        if depth == 0 and id(module) in _roots:
            _root_post(module, args, output)
    except Exception:
        pass


_open = {}
_saving = {}  # (id(module), thread) -> the saved-tensors hooks entered around that forward
_saved = {}   # storage address -> (weak reference, bytes, device): what the measured forwards saved
_SAVED_MAX = 65536  # forwards that no backward follows (a no_grad forgotten) add no more than this


# The forwards whose saved tensors are noted: those of the first 8 steps, then of every 64th (a
# training step saves the same graph each time; noting ~2 µs a tensor, 80 tensors of a small
# model cost 0.2 % of its steps at every 16th).
_SAVES_EVERY = 64


def _note_saved(tensor):
    """The pack hook: notes the tensor's storage, returns the tensor itself (saved as usual)."""
    try:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key and key not in _saved and len(_saved) < _SAVED_MAX:
            _saved[key] = (_StorageWeakRef(storage), storage.nbytes(), tensor.get_device())
    except Exception:
        pass
    return tensor


def _unpack(tensor):
    return tensor


def _start_saving(module):
    """Enters the saved-tensors hooks around a measured training forward (not a compiled model,
    whose graph is its compiler's business)."""
    torch = tidemark._torch
    if (
        _StorageWeakRef is None
        or not _always_call  # a forward that raised would leave the hooks on
        or type(module).__name__ == "OptimizedModule"
        or getattr(module, "_compiled_call_impl", None) not in (None, _call_of(module, compiled=False))
    ):
        return
    hooks = torch.autograd.graph.saved_tensors_hooks(_note_saved, _unpack)
    hooks.__enter__()
    _saving[(id(module), threading.get_ident())] = hooks


def _call_of(module, compiled=None):
    """The call through which the probe observes `module` (`_observe_call`), or None; with
    `compiled` False, only one around the module's own (not compiled) call."""
    observed = _observed.get(id(module))
    if observed is None or observed[0]() is not module or (compiled is False and observed[2] is not None):
        return None
    return observed[1]


def _stop_saving(module):
    hooks = _saving.pop((id(module), threading.get_ident()), None)
    if hooks is not None:
        hooks.__exit__(None, None, None)


def _saved_before_backward():
    """What the forwards since the last backward saved and is still alive as this backward
    begins: (weak reference, bytes, device) entries; `None` when they were not measured."""
    if not _saved:
        return None
    try:
        alive = [entry for entry in _saved.values() if not entry[0].expired()]
    except Exception:
        alive = None
    _saved.clear()
    return alive


def _send_saved_freed(saved):
    """Sends what of `saved` the backward freed, per device (-1: the host)."""
    try:
        freed = {}
        for ref, size, device in saved:
            freed[device] = freed.get(device, 0) + (size if ref.expired() else 0)
        for device, size in freed.items():
            tidemark._saved_freed(device, size)
    except Exception:
        pass


def models():
    """The root models found so far."""
    return list(_roots.values())


def optimizers():
    """The optimizers seen stepping, alive."""
    return [o for o in (ref() for ref in _optimizers) if o is not None]


def _root_pre(module, args):
    """A root model's call begins: forward, or eval when gradients are off, in inference mode or
    when the model is in eval mode. A step starts with its first training forward (an eval
    between steps does not count: the gradients of the step before may still be there). (Every
    step's hot path: the mode and the sample of steps written out.) Returns the begin time of a
    forward that is not observed (``_observing``), for its edges if it raises; else None."""
    global _measured_step, _step_began
    try:
        torch = tidemark._torch
        step = tidemark._step
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not module.training:
            name = "eval"
            if _evaluating:  # a call inside an evaluation: the evaluation is its phase
                _open[(id(module), _get_ident())] = None
                return None
        else:
            if _evaluating:
                _end_evaluation()
            if id(module) not in _trained:
                _trained[id(module)] = module
            _step_began = True
            if not _observing:
                return _monotonic_ns()
            name = "forward"
            if step != _measured_step:
                _measured_step = step
                tidemark._at_step_start(torch)
        _open[(id(module), _get_ident())] = name
        if tidemark._sock is not None:
            tidemark._edge("b", name)
        if name == "forward" and step is not None and (step < 8 or step % _SAVES_EVERY == 0):
            _start_saving(module)
    except Exception:
        pass


def _root_post(module, args, output):
    try:
        name = _open.pop((id(module), _get_ident()), None)
        if _saving and name == "forward":
            _stop_saving(module)
        if name is not None and tidemark._sock is not None:
            tidemark._edge("e", name)
    except Exception:
        pass


def _stop_discovering():
    """Once the optimizers' cycle is known (at the second step's end of a loop with one; so a
    model first called after another model's optimizer step is found too): observe only the
    roots found, drop the global hooks."""
    global _discovering
    _discovering = False
    for handle in _global_handles:
        handle.remove()
    _global_handles.clear()
    for module in list(_roots.values()):
        if _call_of(module) is None and not _observe_call(module):
            _hook(module)


def _hook(module):
    """Hooks a root model's forward."""
    # First among the module's hooks: FSDP's own pre-hook gathers the full parameters, and
    # the categories are taken before it (sharded parameters by their local size).
    try:
        module.register_forward_pre_hook(_hook_pre, prepend=True)
    except TypeError:  # torch < 2.0
        module.register_forward_pre_hook(_hook_pre)
    try:
        module.register_forward_hook(_hook_post, always_call=True)
    except TypeError:  # torch < 2.1
        module.register_forward_hook(_hook_post)


_hooked_silent = {}  # (id(module), thread) -> the begin time of a hooked forward not observed


def _hook_pre(module, args):
    if not _is_compiling():
        silent = _root_pre(module, args)
        if silent is not None:
            _hooked_silent[(id(module), _get_ident())] = silent


def _hook_post(module, args, output):
    if not _is_compiling():
        if _hooked_silent:
            silent = _hooked_silent.pop((id(module), _get_ident()), None)
            # A hook that is always called runs inside the module's exception handler when its
            # forward raised.
            if silent is not None and sys.exc_info()[0] is not None:
                _late_phase("forward", silent)
        _root_post(module, args, output)


def _calls_can_be_observed(torch):
    """Whether this torch's ``Module.__call__`` calls ``_compiled_call_impl`` when it is set, and
    a module's pickles and copies leave it out (``__getstate__``): then a root is observed
    through it, off the hooks' slow path."""
    try:
        module = torch.nn.Module()
        if (
            getattr(torch.nn.Module, "_wrapped_call_impl", None) is None
            or torch.nn.Module.__call__ is not torch.nn.Module._wrapped_call_impl
            or module._compiled_call_impl is not None
        ):
            return False
        module._compiled_call_impl = len
        return "_compiled_call_impl" not in module.__getstate__()
    except Exception:
        return False


def _observe_call(module, root=True):
    """Observes a root model's calls through the call ``Module.__call__`` makes first (around
    the compiled one where ``module.compile()`` set it), where that can be (not for a class with
    its own ``__call__``); False where it cannot. Not `root`: a compiled model, a root only
    where it is called outside any other root. Nothing of it runs where a compiled function calls
    the model (dynamo would trace it)."""
    if not _calls_observable or type(module).__call__ is not _torch_module_call():
        return False
    ref = weakref.ref(module)  # the probe must not keep a model alive, not even in a cycle
    pre, post, compiling = (_root_pre if root else _compiled_pre), _root_post, _is_compiling
    compiled = module.__dict__.get("_compiled_call_impl")

    def call(*args, **kwargs):
        module = ref()
        run = module._call_impl if compiled is None else compiled
        if compiling():
            return run(*args, **kwargs)
        silent = pre(module, args)
        try:
            return run(*args, **kwargs)
        except BaseException:
            if silent is not None:  # a forward not observed raised: its edges now
                _late_phase("forward", silent)
            raise
        finally:
            post(module, args, None)

    if not _observed:
        _replicas_not_observed(tidemark._torch.nn.Module)
    module.__dict__["_compiled_call_impl"] = call
    _observed[id(module)] = (ref, call, compiled, root)
    return True


def _modes_observed(module_class):
    """Wraps ``Module.train`` (which ``eval()`` calls): an evaluation begins where a model that
    has trained is put in eval mode outside any phase, and ends where every such model is back
    in training mode (see the module's doc)."""
    train = module_class.train

    def train_observed(self, *args, **kwargs):
        global _mode_depth
        _mode_depth += 1
        try:
            return train(self, *args, **kwargs)
        finally:
            _mode_depth -= 1
            if _mode_depth == 0 and _trained:
                _mode_changed()

    train_observed.__doc__ = train.__doc__
    train_observed.__wrapped__ = train
    module_class.train = train_observed


def _mode_changed():
    """After a model's mode was set: whether an evaluation begins or ends."""
    global _evaluating
    try:
        if _is_compiling():
            return
        evaluating = any(not model.training for model in list(_trained.values()))
        if evaluating and not _evaluating:
            if _open or _in_backward[0] or tidemark._sock is None:
                return  # inside a phase (or not recording): not an evaluation of the loop
            _evaluating = True
            tidemark._edge("b", "eval")
        elif not evaluating and _evaluating:
            _end_evaluation()
    except Exception:
        pass


def _end_evaluation():
    """The evaluation open ends (its model back in training mode, a training phase begins, or the
    job ends)."""
    global _evaluating
    _evaluating = False
    try:
        if tidemark._sock is not None:
            tidemark._edge("e", "eval")
    except Exception:
        pass


def _compiled_pre(module, args):
    """A compiled model's call: a root's where no root is open in this thread (a compiled block
    of a model is not)."""
    try:
        if _in_forward() or not _is_model(module):
            return None
        _roots[id(module)] = module
    except Exception:
        return None
    return _root_pre(module, args)


def _compiles_observed(module_class):
    """``module.compile()`` makes the module's call run compiled whole, where the hooks that find
    roots do nothing: the compiled model is observed around its compiled call from then on."""
    compile_ = getattr(module_class, "compile", None)
    if compile_ is None:
        return

    def compile_observed(self, *args, **kwargs):
        result = compile_(self, *args, **kwargs)
        try:
            # Observed already (a root, or compiled before): around its new call, as it was.
            observed = _observed.pop(id(self), None)
            root = observed is not None and observed[0]() is self and observed[3]
            if not _observe_call(self, root) and root:
                _hook(self)
        except Exception:
            pass
        return result

    compile_observed.__doc__ = compile_.__doc__
    compile_observed.__wrapped__ = compile_
    module_class.compile = compile_observed


_replicas_guarded = [False]


def _replicas_not_observed(module_class):
    """DataParallel's replicas copy their module's attributes whole
    (``_replicate_for_data_parallel``): a replica of an observed root leaves the root's call
    out, or it would call the root (on another device) instead of itself."""
    replicate = getattr(module_class, "_replicate_for_data_parallel", None)
    if replicate is None or _replicas_guarded[0]:
        return
    _replicas_guarded[0] = True

    def replicate_unobserved(self):
        replica = replicate(self)
        try:
            call = replica.__dict__.get("_compiled_call_impl")
            if call is not None and call is _call_of(self):
                del replica.__dict__["_compiled_call_impl"]
        except Exception:
            pass
        return replica

    replicate_unobserved.__doc__ = replicate.__doc__
    replicate_unobserved.__wrapped__ = replicate
    module_class._replicate_for_data_parallel = replicate_unobserved


def _torch_module_call():
    return tidemark._torch.nn.Module.__call__


_optimizer_refs = {}  # id -> weak reference, to tell a new optimizer in one look
_pacer = None        # (a weak reference to) the optimizer whose step's end ends a training step …
_cycle = ()          # … those that step in turn with it …
_learning = []       # … or, until they are known (then None), those seen stepping, in order
_CYCLE_MOST = 8      # (a cycle of more optimizers, or a new one at every step, is not learned)


def _ends_step(opt):
    """Whether the end of ``opt``'s step ends the training step: the end of the last optimizer
    of the cycle they step in, learned when one of them steps again (a single optimizer: every
    step of it). While it is learned, every optimizer step ends one (as where each step has its
    own); an optimizer not in the cycle (a new one, one that steps seldom) starts the learning
    again. Where no cycle of at most ``_CYCLE_MOST`` shows (a new optimizer at every step),
    every optimizer step ends one. Optimizers are told apart by weak references, not ids: a new
    one can take a dead one's id."""
    global _pacer, _cycle, _learning
    if _learning is None:
        if _pacer() is opt:
            return True
        if any(r() is opt for r in _cycle):
            return False
        _learning = []
    for i, r in enumerate(_learning):
        if r() is opt:
            # The first to step again: the cycle is known. Where it is the first of the cycle,
            # the last ends the step; where another repeats first (one steps more often than
            # the others do), it ends every step it makes.
            _pacer = _learning[-1] if i == 0 else r
            _cycle = tuple(_learning)
            _learning = None
            return _pacer is r
    if len(_learning) == _CYCLE_MOST:
        _learning.clear()
    _learning.append(weakref.ref(opt))
    return True


def _optimizer_pre(opt, args, kwargs):
    global _silent_optimizer, _step_began
    if _evaluating:
        _end_evaluation()
    _step_began = True
    if not _observing:
        _silent_optimizer = _monotonic_ns()
        return
    if tidemark._sock is not None:
        tidemark._edge("b", "optimizer")
    try:
        ref = _optimizer_refs.get(id(opt))
        if ref is None or ref() is not opt:
            ref = _optimizer_refs[id(opt)] = weakref.ref(opt)
            _optimizers.append(ref)
    except Exception:
        pass


def _optimizer_post(opt, args, kwargs):
    global _silent_optimizer
    try:
        if not _observing:
            _silent_optimizer = None
        elif tidemark._sock is not None:
            tidemark._edge("e", "optimizer")
        try:
            ends = _ends_step(opt)
        except Exception:
            ends = True
        if not ends:
            return
        tidemark._at_step_end()
        if not tidemark._manual_step:
            tidemark._step = (tidemark._step or 0) + 1
        now = _monotonic_ns()
        if (_one_in == 1 or _decide_observed(now)) and not tidemark._manual_step:
            # What the new step's edges read of the host, decided as its number changes: its
            # first edge then takes the short way like the others (``tidemark._edge``). (A step
            # that is not observed decides at its first edge, if it has one: an eval.)
            tidemark._decide_host(tidemark._step, now)
        if _discovering and _learning is None:
            _stop_discovering()
    except Exception:
        pass


def _decide_observed(now):
    """At an optimizer step's end, where a sample of steps is observed (``_one_in`` is not 1):
    whether the next step is observed (see the module's doc), and the run of steps not observed
    sent as it ends. Returns whether it is."""
    global _observing, _steps_ended, _step_ended_ns, _countdown, _unobserved, _not_observed, _step_began
    _step_began = False
    # What the allocator's numbers took at the edges since the last step's end (on a GPU, more
    # than the rest of observing a step).
    read_ns = tidemark._allocator_read_ns
    tidemark._allocator_read_ns = 0
    took = None if _step_ended_ns is None else now - _step_ended_ns
    _step_ended_ns = now
    _steps_ended += 1
    step = tidemark._step
    if (
        _steps_ended < _OBSERVE_FIRST
        or took is None
        or (step is not None and step % _SAVES_EVERY == 0)
        or tidemark._sock is None
    ):
        observe = True
        _countdown = 0
    elif _countdown > 0:
        _countdown -= 1
        observe = False
    elif _observing:
        # An observed step ended: this many steps after it are not.
        every = _one_in or math.ceil((_OBSERVED_STEP_NS + read_ns) / (_OBSERVED_SHARE * max(took, 1)))
        skip = min(every, _OBSERVE_EVERY_MOST) - 1
        observe = skip == 0
        _countdown = max(skip - 1, 0)
    else:
        observe = True
    if observe:
        if _unobserved is not None:
            _send_unobserved(now)
    else:
        _not_observed += 1
        if _unobserved is None:
            _unobserved = [now, None if tidemark._manual_step else step, 1]
        else:
            _unobserved[2] += 1
    _observing = observe
    return observe


def _send_unobserved(now):
    """Sends the run of steps not observed that ends now."""
    global _unobserved
    since, first, steps = _unobserved
    _unobserved = None
    if tidemark._sock is not None:
        first = "-" if first is None else first
        tidemark._add(f"{tidemark._PROTOCOL} U {now} {tidemark._pid} {tidemark._rank} {first} {steps} {since}", now)


def _late_phase(name, began):
    """A phase that was not observed raised (an out-of-memory error): its edges now, the begin
    at the time it began (without numbers), so that the error is put in its phase and step."""
    try:
        if tidemark._sock is None:
            return
        # An edge's entry as ``tidemark._read_edge`` makes it, with nothing read.
        tidemark._add((began, tidemark._step, "b", None, None, None, name), began)
        tidemark._edge("e", name)
    except Exception:
        pass


def _unobserved_at_error():
    """At an out-of-memory error (the allocator's observer) and at exit: an optimizer step that is
    not observed and has not ended gets its edges."""
    global _silent_optimizer
    began = _silent_optimizer
    if began is not None:
        _silent_optimizer = None
        _late_phase("optimizer", began)


def _at_exit():
    """At exit: an optimizer step cut short, the last run of steps not observed, and a note of
    how many were."""
    try:
        if _evaluating:
            _end_evaluation()
        _unobserved_at_error()
        # The step decided last is counted only if it began (a loop ends after a step's end).
        began = int(_step_began)
        if _unobserved is not None:
            _unobserved[2] += began - 1
            if _unobserved[2] > 0:
                _send_unobserved(_monotonic_ns())
        skipped = _not_observed + (0 if _observing else began - 1)
        if skipped and tidemark._sock is not None:
            steps = _steps_ended + began
            later = steps - _OBSERVE_FIRST
            text = (f"the probe observed the phases of {steps - skipped} of {steps} steps (all of the "
                    f"first {_OBSERVE_FIRST}, then about one in {round(later / max(later - skipped, 1))}, "
                    "and every eval; every step with TIDEMARK_OBSERVE_ONE_IN=1 or collector --observe-every-step)")
            tidemark._send_now(f"{tidemark._PROTOCOL} N {_monotonic_ns()} {tidemark._pid} {tidemark._rank} {text}".encode())
    except Exception:
        pass
