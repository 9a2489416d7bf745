"""Who holds the memory: the categories at step starts, and a census of the live tensors grouped
by who holds them, a few times per run (when: the probe's ``_at_step_start``, within their shares
of the job's time).

Categories (per device): parameters, gradients and each optimizer's state, each storage counted
once, sharded tensors (DTensor) by their local size. Gradients are read at each step start; the
parameter list is cached and read again every ``_REFRESH_STEPS`` steps, the optimizer state every
``_OPTIMIZER_REFRESH_STEPS`` or when it gains entries, so that a step costs about one attribute
read per parameter.

The census walks from where a user names things — the globals of ``__main__`` and of the job's own
modules, the locals of every thread's frames (and of the frames an uncaught exception left), the
root models and the optimizers — through attributes, containers, submodules, hooks and closures,
and groups every tensor it reaches under the name of its holder: the path up to the first
container (``__main__.all_losses``, ``__main__.model.feature_cache``,
``hook.outputs``). A tensor that keeps its autograd graph also counts the tensors the graph saved.
Tensors it cannot reach that way are counted as unreached. Parameters, gradients and optimizer
state are the categories' and are left out. A census stops at its time limit and says so
(``truncated``, with how far it got); breadth first, it has then named the holders nearest the
job's names.

Nothing here may raise into the job: an object that errors when looked at is skipped and counted.
"""
import functools
import gc
import json
import os
import sys
import sysconfig
import threading
import time
import types
import weakref
from collections import Counter, deque

_REFRESH_STEPS = 64         # the parameter list is read again this often
_OPTIMIZER_REFRESH_STEPS = 256  # … and the optimizers' state, unless it gains entries
_ENTRIES_EVERY = 8          # steps: how often the entries inside each parameter's state are counted
_HOLDERS_SENT = 48          # the largest holders go out; the rest are summed
_LIMIT_S = 0.5              # a census stops after this long (the caller may say otherwise) …
_CHECK_EVERY = 256          # … looking at the clock every this many objects
_CHECK_ITEMS = 4096         # … and every this many items of one container
_GRAPH_NODE_LIMIT = 200_000
_DEPTH_LIMIT = 24

# --- categories -------------------------------------------------------------------------------

_params = []                # [(weakref to the parameter, device, is_dtensor)]
_grad_refs = []             # [(device, [weakref to a parameter]), (device, is_dtensor)]: the gradients' loop
_param_bytes = {}           # device -> bytes of the parameters' storages
_opt_bytes = []             # per optimizer (in `optimizers` order): {device: bytes}
_opt_sizes = []             # per optimizer: len(state) when last read
_opt_entries = []           # per optimizer: the entries of its parameters' state when last read
_refreshed_step = None
_opt_refreshed_step = None
_optimizer_ids = []
_param_keys = set()         # the parameters' memory, so that optimizer state sharing it counts once


_PLAIN = set()              # tensor types that are never sharded (found as they come)


def _local(t):
    """A sharded tensor's local part (DTensor), else the tensor."""
    kind = type(t)
    if kind in _PLAIN:
        return t
    local = getattr(t, "_local_tensor", None)
    if local is None:
        if kind.__name__ in ("Tensor", "Parameter"):
            _PLAIN.add(kind)
        return t
    return local


def _storage(t):
    """(key, device, bytes) of a tensor's storage; None when it has none that can be read."""
    t = _local(t)
    storage = t.untyped_storage()
    device = t.get_device()
    return (storage.data_ptr(), device), device, storage.nbytes()


def _storage_key(t):
    """The key `_storage` gives, without making a storage object (the first one made for a
    tensor costs tens of µs: a census at step 16 would pay it for every parameter and every
    piece of optimizer state)."""
    t = _local(t)
    return (t.data_ptr() - t.storage_offset() * t.element_size(), t.get_device())


def _extent(t):
    """(key, device, bytes) of the memory a tensor views: cheaper than its storage (no storage
    object is made), which the categories read for thousands of tensors."""
    t = _local(t)
    device = t.get_device()
    return (t.data_ptr(), device), device, t.nbytes


def _refresh(models, optimizers, step):
    """Reads the parameters and the optimizers' state again."""
    global _params, _param_bytes, _refreshed_step, _grad_refs
    params, seen, by_device = [], set(), {}
    storages = set()

    def add(p):
        if id(p) in seen:
            return
        seen.add(id(p))
        try:
            key, device, nbytes = _extent(p)
        except Exception:
            return
        params.append((weakref.ref(p), device, hasattr(p, "_local_tensor")))
        if key not in storages:
            storages.add(key)
            by_device[device] = by_device.get(device, 0) + nbytes

    for model in models:
        try:
            for p in model.parameters():
                add(p)
        except Exception:
            pass
    for opt in optimizers:
        try:
            for group in opt.param_groups:
                for p in group["params"]:
                    add(p)
        except Exception:
            pass
    _params, _param_bytes = params, by_device
    groups = {}
    for ref, device, sharded in params:
        groups.setdefault((device, sharded), []).append(ref)
    _grad_refs = list(groups.items())
    _param_keys.clear()
    _param_keys.update(storages)
    _refreshed_step = step


def _refresh_optimizers(optimizers, step):
    """Reads the optimizers' state again (in-place updates keep its size: only new entries, new
    optimizers or a long while make it stale)."""
    global _opt_bytes, _opt_sizes, _opt_entries, _optimizer_ids, _opt_refreshed_step
    storages = set(_param_keys)
    _opt_bytes = [_optimizer_state(opt, storages) for opt in optimizers]
    _opt_sizes = [_state_size(opt) for opt in optimizers]
    _opt_entries = [_state_entries(opt) for opt in optimizers]
    _optimizer_ids = [id(opt) for opt in optimizers]
    _opt_refreshed_step = step


def _state_size(opt):
    try:
        return len(opt.state)
    except Exception:
        return -1


def _state_entries(opt):
    """The entries of all parameters' state: custom code that stores a tensor under a new key
    (a snapshot a step) adds one without adding a parameter. ~25 µs for 1,000 parameters, so
    counted every `_ENTRIES_EVERY` steps."""
    try:
        return sum(map(len, list(opt.state.values())))
    except Exception:
        return -1


def _optimizer_state(opt, storages, extent=_extent):
    by_device = {}
    try:
        states = list(opt.state.values())
    except Exception:
        return by_device
    for state in states:
        try:
            values = list(state.values())
        except Exception:
            continue
        for value in values:
            try:
                key, device, nbytes = extent(value)
            except Exception:
                continue
            if key not in storages:
                storages.add(key)
                by_device[device] = by_device.get(device, 0) + nbytes
    return by_device


def categories(models, optimizers, step):
    """{device: (parameters, gradients, [state per optimizer])}; device -1 is the host."""
    optimizers_stale = (
        _opt_refreshed_step is None
        or not 0 <= step - _opt_refreshed_step < _OPTIMIZER_REFRESH_STEPS
        or [id(o) for o in optimizers] != _optimizer_ids
        or any(_state_size(o) != n for o, n in zip(optimizers, _opt_sizes))
        or (
            step % _ENTRIES_EVERY == 0
            and any(_state_entries(o) != n for o, n in zip(optimizers, _opt_entries))
        )
    )
    # New optimizer state usually means new parameters: read both again then.
    if optimizers_stale or _refreshed_step is None or not 0 <= step - _refreshed_step < _REFRESH_STEPS:
        _refresh(models, optimizers, step)
    if optimizers_stale:
        _refresh_optimizers(optimizers, step)
    grads = gradients()
    devices = set(_param_bytes) | set(grads)
    for state in _opt_bytes:
        devices |= set(state)
    return {
        d: (_param_bytes.get(d, 0), grads.get(d, 0), [s.get(d, 0) for s in _opt_bytes])
        for d in devices
    }


def gradients():
    """{device: bytes of the parameters' gradients} now (the parameters as last read)."""
    grads = {}
    for (device, sharded), refs in _grad_refs:
        total = 0
        for ref in refs:
            p = ref()
            if p is not None:
                g = p.grad
                if g is not None:
                    try:
                        total += _local(g).nbytes if sharded else g.nbytes
                    except Exception:
                        pass
        if total:
            grads[device] = grads.get(device, 0) + total
    return grads


def category_tensors(tensor_type, optimizers):
    """What the categories count, to leave it out of the census: the storages (a view of one
    found elsewhere adds no bytes) and the ids of the tensors themselves (not walked at all:
    a model with thousands of parameters and their optimizer state is not looked at again)."""
    keys, ids = set(), set()

    def add(t):
        ids.add(id(t))
        try:
            keys.add(_storage_key(t))
        except Exception:
            pass

    for ref, _, _ in _params:
        p = ref()
        if p is None:
            continue
        add(p)
        g = p.grad
        if g is not None:
            add(g)
    for opt in optimizers:
        try:
            states = list(opt.state.values())
        except Exception:
            continue
        for state in states:
            try:
                values = list(state.values())
            except Exception:
                continue
            for value in values:
                if issubclass(type(value), tensor_type):
                    add(value)
    return keys, ids


# --- the census -------------------------------------------------------------------------------

_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)
_SCALAR_TYPES = frozenset(_SCALARS)
# What `functools.lru_cache` and `functools.cache` return: its cache is reached only through the
# garbage collector's view of it (a dict of results, or of list links that hold them).
_CACHE_TYPE = type(functools.lru_cache(maxsize=1)(lambda: None))

_SKIP_TYPES = (
    types.ModuleType, types.CodeType, types.FrameType, types.GeneratorType,
    types.CoroutineType, types.AsyncGeneratorType, types.BuiltinFunctionType,
    types.MethodWrapperType, types.WrapperDescriptorType, types.GetSetDescriptorType,
    types.MemberDescriptorType, types.MappingProxyType, weakref.ref, threading.Thread,
)
_HOOK_DICTS = {
    "_forward_hooks": "forward hook",
    "_forward_pre_hooks": "forward pre-hook",
    "_backward_hooks": "backward hook",
    "_backward_pre_hooks": "backward pre-hook",
}
_MODULE_SKIP = {
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_non_persistent_buffers_set", "training",
}


_library_prefixes = None


def _libraries():
    global _library_prefixes
    if _library_prefixes is None:
        _library_prefixes = _library_paths()
    return _library_prefixes


def _library_paths():
    paths = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            path = sysconfig.get_paths()[key]
            paths.update((path, os.path.realpath(path)))
        except Exception:
            pass
    here = os.path.dirname(os.path.realpath(__file__))
    paths.add(here)
    return tuple(p + os.sep for p in paths)


_library_files = {}


def _is_library(filename, libraries):
    """Whether a file belongs to Python, an installed package or the probe (not the job)."""
    if not filename or filename.startswith("<"):
        return True
    known = _library_files.get(filename)
    if known is None:
        known = _library_path(filename, libraries)
        if not known:  # the path as written may go through a link into a library
            try:
                known = _library_path(os.path.realpath(filename), libraries)
            except Exception:
                known = True
        _library_files[filename] = known
    return known


def _library_path(path, libraries):
    return path.startswith(libraries) or "site-packages" in path or "dist-packages" in path


class _Census:
    def __init__(self, torch, excluded, deadline_ns=None):
        self.torch = torch
        self.deadline_ns = deadline_ns  # perf_counter_ns; None: no limit
        self.tensor_type = torch.Tensor
        self.module_type = torch.nn.Module
        self.seen = set()           # ids of objects looked at
        self.keep = []              # keeps graph nodes alive, so their ids stay unique
        self.storages = set(excluded)
        self.holders = {}           # (key, device) -> [name, what, tensors, bytes, graph_bytes, with_graph]
        self.items = {}             # holder key -> len of the container
        self.queue = deque()
        self.skipped = 0
        self.visited = 0
        self.graph_nodes = 0
        self.saved_names = {}       # graph node type -> its `_saved_*` attribute names
        self.truncated = False      # stopped at its time limit: `visited` says how far it got
        self.tensors = 0
        self.bytes = 0
        self.libraries = _libraries()
        self.live_frames = set()    # ids of the frames running (and an uncaught exception's)

    def push(self, obj, path, what, holder):
        if issubclass(type(obj), _SCALARS):
            return
        oid = id(obj)
        if oid in self.seen:
            return
        self.seen.add(oid)
        self.queue.append((obj, path, what, holder))

    def push_items(self, items, holder):
        """A container's items, all kept by one holder: a container of millions looks at the
        clock as it goes, so the time limit holds inside it too."""
        push = self.push
        for start in range(0, len(items), _CHECK_ITEMS):
            if start and self.out_of_time():
                return
            chunk = items[start:start + _CHECK_ITEMS]
            # A run of numbers or strings (a record of a step's statistics) holds nothing to
            # follow: its types are told apart in C, without a call for each item.
            if set(map(type, chunk)) <= _SCALAR_TYPES:
                continue
            for item in chunk:
                push(item, None, None, holder)

    def out_of_time(self):
        if self.deadline_ns is not None and time.perf_counter_ns() > self.deadline_ns:
            self.truncated = True
        return self.truncated

    def run(self):
        queue = self.queue
        while queue:
            if self.visited % _CHECK_EVERY == 0 and self.out_of_time():
                break
            obj, path, what, holder = queue.popleft()
            self.visited += 1
            try:
                self.visit(obj, path, what, holder)
            except Exception:
                self.skipped += 1

    def visit(self, obj, path, what, holder):
        # Types are looked at with type(), never isinstance(): an object's `__class__` may be a
        # property that warns or raises (deprecated aliases, lazy proxies).
        kind = type(obj)
        if issubclass(kind, self.tensor_type):
            self.tensor(obj, holder or (path, what, path))
            return
        if kind in (list, tuple, set, frozenset, deque):
            here = holder or self.hold(path, f"{kind.__name__}, {what}", len(obj), id(obj))
            self.push_items(list(obj), here)
            return
        if issubclass(kind, dict):
            here = holder or self.hold(path, f"{kind.__name__}, {what}", len(obj), id(obj))
            self.push_items(list(obj.values()), here)
            return
        if issubclass(kind, BaseException):
            self.exception(obj, path, what, holder)
            return
        if kind is types.GeneratorType:
            self.frame_locals(obj.gi_frame, path, what, holder, "a suspended generator")
            return
        if issubclass(kind, _SKIP_TYPES):
            return
        if issubclass(kind, type):
            if holder is None and self.user_module(getattr(obj, "__module__", None)):
                for name, value in list(vars(obj).items()):
                    # A cached method (`@functools.cache` on `__getitem__`) holds what it returned.
                    if not name.startswith("__") or type(value) is _CACHE_TYPE:
                        self.push(value, f"{path}.{name}", f"a class attribute of {obj.__name__}", None)
            return
        if kind is types.FunctionType:
            self.function(obj, path, what, holder)
            return
        if kind is _CACHE_TYPE:
            self.cache(obj, path, what, holder)
            return
        if kind is types.MethodType:
            self.push(obj.__func__, path, what, holder)
            self.push(obj.__self__, path, what, holder)
            return
        if issubclass(kind, self.module_type):
            self.module(obj, path, holder)
            return
        if issubclass(kind, functools.partial):
            self.push(obj.func, path, what, holder)
            for arg in obj.args:
                self.push(arg, path, what, holder)
            for value in obj.keywords.values():
                self.push(value, path, what, holder)
            return
        # Read past the object's own __getattr__/__getattribute__ (proxies, lazy loaders).
        try:
            attrs = object.__getattribute__(obj, "__dict__")
        except Exception:
            attrs = None
        owner = kind.__name__
        if type(attrs) is dict:
            for name, value in list(attrs.items()):
                self.push(value, None if holder else f"{path}.{name}", f"an attribute of {owner}", holder)
        for name in self.slots(kind):
            try:
                value = object.__getattribute__(obj, name)
            except Exception:
                continue
            self.push(value, None if holder else f"{path}.{name}", f"an attribute of {owner}", holder)

    def exception(self, err, path, what, holder):
        """A caught exception kept (`errors.append(err)`): its traceback keeps every frame it
        passed through, and each frame its locals (a failed forward's activations). Said of the
        holder: which of the job's own functions' frames it keeps."""
        frames = []
        tb = err.__traceback__
        while tb is not None and len(frames) < _DEPTH_LIMIT:
            # A frame still running (the loop that caught it) is the job's own: its locals are
            # named from there.
            if id(tb.tb_frame) not in self.live_frames:
                frames.append(tb.tb_frame)
            tb = tb.tb_next
        own = [f.f_code.co_name for f in frames if not _is_library(f.f_code.co_filename, self.libraries)]
        names = ", ".join(f"{name}()" for name in dict.fromkeys(own or [f.f_code.co_name for f in frames]))
        kept = f"{type(err).__name__} whose traceback keeps the frames of {names}" if frames else None
        if holder is None:
            here = self.hold(path, f"{kept or type(err).__name__}, {what}", 1, id(err))
        elif kept is not None and "traceback" not in (holder[1] or ""):
            here = (holder[0], f"{holder[1]}: {kept}", holder[2])
        else:
            here = holder
        for frame in frames:
            self.frame_locals(frame, path, what, here, None)
        for value in (err.__cause__, err.__context__, *err.args):
            self.push(value, None, None, here)
        try:
            attrs = object.__getattribute__(err, "__dict__")
        except Exception:
            attrs = None
        if type(attrs) is dict:
            for value in list(attrs.values()):
                self.push(value, None, None, here)

    def frame_locals(self, frame, path, what, holder, kind):
        """The locals of a frame that something keeps (a traceback, a suspended generator)."""
        if frame is None:
            return
        try:
            local = dict(frame.f_locals)
        except Exception:
            self.skipped += 1
            return
        if holder is None:
            holder = self.hold(path, f"{kind} of {frame.f_code.co_name}(), {what}", len(local), id(frame))
        for value in local.values():
            self.push(value, None, None, holder)

    def slots(self, kind):
        names = []
        for klass in getattr(kind, "__mro__", ()):
            slots = klass.__dict__.get("__slots__", ())
            if isinstance(slots, str):
                slots = (slots,)
            names.extend(s for s in slots if s not in ("__dict__", "__weakref__"))
        return names

    def module(self, module, path, holder):
        owner = type(module).__name__
        attrs = getattr(module, "__dict__", {})
        for name, value in list(attrs.items()):
            if name in _MODULE_SKIP:
                continue
            if name in ("_parameters", "_buffers", "_modules"):
                what = "a submodule" if name == "_modules" else "a parameter" if name == "_parameters" else "a buffer"
                for child, value in list(value.items()):
                    if value is not None:
                        self.push(value, None if holder else f"{path}.{child}", f"{what} of {owner}", holder)
                continue
            if name in _HOOK_DICTS:
                for hook in list(value.values()):
                    label = f"a {_HOOK_DICTS[name]} on {path}" if holder is None else None
                    self.push(hook, path, label, holder)
                continue
            self.push(value, None if holder else f"{path}.{name}", f"an attribute of {owner}", holder)

    def function(self, func, path, what, holder):
        cells = func.__closure__
        if not cells:
            return
        name = getattr(func, "__name__", "function")
        for var, cell in zip(func.__code__.co_freevars, cells):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if holder is None:
                where = f"a closure variable of {name}()"
                if what and ("hook" in what):
                    where += f", {what}"
                self.push(value, f"{name}.{var}", where, None)
            else:
                self.push(value, None, None, holder)

    def cache(self, func, path, what, holder):
        """A function behind `functools.lru_cache`/`cache`: what it returned and keeps is one
        holder, named by the function."""
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", "function")
        try:
            size = func.cache_info().currsize
        except Exception:
            size = 0
        here = holder or self.hold(path, f"the cache of {name}() (functools.lru_cache)", size, id(func))
        for ref in gc.get_referents(func):
            if type(ref) is not dict:
                continue
            for value in list(ref.values()):
                # A bounded cache keeps each result in a link of its list (key, result).
                if type(value).__name__ == "_lru_list_elem":
                    for inner in gc.get_referents(value):
                        self.push(inner, None, None, here)
                else:
                    self.push(value, None, None, here)
        wrapped = getattr(func, "__wrapped__", None)
        if wrapped is not None:
            self.push(wrapped, path, what, holder)

    def hold(self, path, what, items, ident):
        """A container becomes a holder: named by its path, known across censuses by its id
        (its path may differ from census to census: a frame's local, then an attribute)."""
        key = f"#{ident}"
        self.items[key] = items
        return (path, what, key)

    def user_module(self, name):
        module = sys.modules.get(name) if name else None
        if module is None:
            return False
        return name == "__main__" or not _is_library(getattr(module, "__file__", None), self.libraries)

    def tensor(self, t, holder):
        self.tensors += 1
        try:
            key, device, nbytes = _storage(t)
        except Exception:
            self.skipped += 1
            return
        name, what, ident = holder
        entry = self.holders.get((ident, device))
        if entry is None:
            entry = self.holders[(ident, device)] = [name, what, 0, 0, 0, 0]
        entry[2] += 1
        if key not in self.storages:
            self.storages.add(key)
            entry[3] += nbytes
            self.bytes += nbytes
        grad_fn = getattr(t, "grad_fn", None)
        if grad_fn is not None:
            entry[5] += 1
            entry[4] += self.graph(grad_fn, device)

    def graph(self, root, device):
        """Bytes of the tensors a graph saved (not yet counted), walking its nodes once."""
        total = 0
        stack = [root]
        while stack and self.graph_nodes < _GRAPH_NODE_LIMIT:
            if self.graph_nodes % _CHECK_EVERY == 0 and self.out_of_time():
                break
            node = stack.pop()
            if node is None or id(node) in self.seen:
                continue
            self.seen.add(id(node))
            self.keep.append(node)
            self.graph_nodes += 1
            kind = type(node)
            names = self.saved_names.get(kind)
            if names is None:
                try:
                    names = [n for n in dir(node) if n.startswith("_saved_")]
                except Exception:
                    names = []
                self.saved_names[kind] = names
            for name in names:
                try:
                    value = getattr(node, name)
                except Exception:  # freed by backward, or not a tensor
                    continue
                values = value if type(value) in (list, tuple) else (value,)
                for v in values:
                    if issubclass(type(v), self.tensor_type):
                        try:
                            key, _, nbytes = _storage(v)
                        except Exception:
                            continue
                        if key not in self.storages:
                            self.storages.add(key)
                            total += nbytes
            try:
                stack.extend(n for n, _ in node.next_functions)
            except Exception:
                pass
        return total

    def unreached(self):
        """Tensors the walk did not reach: (count, bytes not yet counted). Looks at every object
        the garbage collector tracks, so only the end and out-of-memory censuses do it."""
        count = total = 0
        tensor_type = self.tensor_type
        tensors, others = set(), set()
        for obj in gc.get_objects():
            kind = type(obj)
            if kind in others:
                continue
            if kind not in tensors:
                if not issubclass(kind, tensor_type):
                    others.add(kind)
                    continue
                tensors.add(kind)
            if id(obj) not in self.seen:
                try:
                    key, _, nbytes = _storage(obj)
                except Exception:
                    continue
                count += 1
                if key not in self.storages:
                    self.storages.add(key)
                    total += nbytes
        return count, total


def _ipython():
    """The IPython shell this process runs (a Jupyter kernel), if any."""
    module = sys.modules.get("IPython")
    if module is None:
        return None
    try:
        return module.get_ipython()
    except Exception:
        return None


def _cell_of(shell, filename):
    """The execution count of the cell whose code IPython compiled as `filename`, if it knows."""
    try:
        return shell.compile._filename_map.get(filename)
    except Exception:
        return None


def _frames(skip):
    """The frames of every thread, innermost first, then those an uncaught exception left."""
    out = []
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_filename not in skip:
                out.append(frame)
            frame = frame.f_back
    tb = getattr(sys, "last_traceback", None)
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


_module_verdicts = {}       # module name -> (id of the module, whether it is the job's own)
_probe_files = None


def _job_modules(main, libraries):
    """The job's own modules (not Python's, an installed package's or the probe's), each judged
    once: a torch process has thousands, some with a costly ``__getattr__``."""
    roots = []
    verdicts = _module_verdicts
    for name, module in list(sys.modules.items()):
        known = verdicts.get(name)
        if known is None or known[0] != id(module):
            own = False
            if module is not main and not name.startswith("tidemark"):
                try:
                    file = getattr(module, "__file__", None)
                    own = bool(file) and isinstance(file, str) and not _is_library(file, libraries)
                except Exception:
                    own = False
            known = verdicts[name] = (id(module), own)
        if known[1]:
            roots.append((name, module))
    return roots


def _probe_file_names():
    global _probe_files
    if _probe_files is None:
        here = os.path.dirname(os.path.realpath(__file__))
        _probe_files = {os.path.join(here, f) for f in os.listdir(here)}
    return _probe_files


def census(torch, models, optimizers, full, limit_s=_LIMIT_S):
    """The census, as a dict ready for JSON; `full` also counts the tensors it cannot reach.
    The walk stops after `limit_s` seconds (None: no limit), and then says it was cut
    (`truncated`) and how far it got (`objects`, `tensors`, `bytes`)."""
    started = time.perf_counter_ns()
    deadline = None if limit_s is None else started + int(limit_s * 1e9)
    excluded, known = category_tensors(torch.Tensor, optimizers)
    walk = _Census(torch, excluded, deadline)
    walk.seen.update(known)
    main = sys.modules.get("__main__")
    # In a Jupyter kernel, IPython's output cache first: a value a cell displayed is held by
    # `Out[N]` (and `_`, `__`, `___`, `_N`, which name the same objects).
    shell = _ipython()
    if shell is not None:
        outputs = getattr(shell, "user_ns", {}).get("Out")
        if type(outputs) is dict:
            for n, value in list(outputs.items()):
                walk.push(value, f"Out[{n}]",
                          f"the output of cell [{n}], kept by IPython's output cache "
                          "(`Out`, `_`: `%reset -f out` frees it)", None)
    roots = []
    if main is not None:
        roots.append(("__main__", main))
    roots.extend(_job_modules(main, walk.libraries))
    for name, module in roots:
        walk.seen.add(id(module))
        for var, value in list(vars(module).items()):
            if not var.startswith("__"):
                walk.push(value, f"{name}.{var}", f"a global of {name}", None)
    frames = _frames(_probe_file_names())
    walk.live_frames.update(id(f) for f in frames)
    frames.sort(key=lambda f: _is_library(f.f_code.co_filename, walk.libraries))
    # In a kernel, the frames of the cell that failed last stay alive with their locals.
    kept_by_error = set()
    if shell is not None:
        tb = getattr(sys, "last_traceback", None)
        while tb is not None:
            kept_by_error.add(id(tb.tb_frame))
            tb = tb.tb_next
    for frame in frames:
        code = frame.f_code
        cell = _cell_of(shell, code.co_filename) if shell is not None else None
        place = (f"cell [{cell}], line {frame.f_lineno}" if cell is not None
                 else f"{os.path.basename(code.co_filename)}:{frame.f_lineno}")
        where = f"a local of {code.co_name}() ({place})"
        if id(frame) in kept_by_error:
            where += (", kept by the last error's traceback "
                      "(`sys.last_traceback = None` frees it)")
        try:
            local = dict(frame.f_locals)
        except Exception:
            walk.skipped += 1
            continue
        for var, value in local.items():
            walk.push(value, var, where, None)
    del frames
    for model in models:
        walk.push(model, f"<{type(model).__name__} model>", "a model the probe saw called", None)
    for opt in optimizers:
        walk.push(opt, f"<{type(opt).__name__} optimizer>", "an optimizer the probe saw step", None)
    try:
        from torch.nn.modules import module as nn_module

        for name in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks"):
            hooks = getattr(nn_module, name, None)
            if type(hooks) is dict:
                for hook in list(hooks.values()):
                    if getattr(hook, "__module__", "").startswith("tidemark"):
                        continue
                    walk.push(hook, "<global hook>", "a global module hook", None)
    except Exception:
        pass
    walk.run()
    unreached_count, unreached_bytes = walk.unreached() if full else (0, 0)
    holders = []
    for (ident, device), (name, what, tensors, nbytes, graph_bytes, with_graph) in walk.holders.items():
        holders.append({
            "key": ident,
            "name": name or "?",
            "what": what or "",
            "device": None if device < 0 else device,
            "tensors": tensors,
            "bytes": nbytes,
            "graph_bytes": graph_bytes,
            "with_graph": with_graph,
            "items": walk.items.get(ident, 0),
        })
    holders.sort(key=lambda h: h["bytes"] + h["graph_bytes"], reverse=True)
    cutoff = 0
    if len(holders) > _HOLDERS_SENT:
        cutoff = holders[_HOLDERS_SENT]["bytes"] + holders[_HOLDERS_SENT]["graph_bytes"]
    result = {
        "holders": holders[:_HOLDERS_SENT],
        "more_holders": max(0, len(holders) - _HOLDERS_SENT),
        "cutoff_bytes": cutoff,
        "tensors": walk.tensors,
        "bytes": walk.bytes,
        "unreached_tensors": unreached_count,
        "unreached_bytes": unreached_bytes,
        "objects": walk.visited,
        "skipped": walk.skipped,
        "truncated": walk.truncated,
        "unreached_counted": full,
    }
    walk.keep.clear()
    result["cost_ns"] = time.perf_counter_ns() - started
    return result


# --- objects that are not tensors ------------------------------------------------------------

_OBJECTS_SENT = 12          # the types that grew most go out …
_CONTAINERS_SENT = 4        # … and the module-level containers that hold their objects
_CONTAINER_SAMPLE = 16      # (a container's items looked at, its last ones: what was added last)
_counted = None             # (step, {type: count}): the objects' growth is said since then …
_first_seen = None          # … taken at the first census after which what the process holds
_COUNT_AFTER_BYTES = 8 << 20  # outside the tensors grew by this much (at the first census: that)
_BLOCK_BYTES = 32           # (a small object of Python's allocator, about)
_CONTAINER_TYPES = (list, dict, set, deque)


def _type_name(kind):
    module = getattr(kind, "__module__", None) or "?"
    return f"{module}.{getattr(kind, '__qualname__', kind.__name__)}"


def count_objects(step, result):
    """At a step census (`result`): where what the process holds outside the tensors the census
    reached grew since the first by at least ``_COUNT_AFTER_BYTES``, the objects the cycle
    collector tracks, counted by type (once: what the last census' growth is measured from).
    Counting costs ~0.17 µs an object (45 ms in a process that imported torch): only a job
    whose memory grows outside its tensors pays it. Outside the tensors: the C heap in use
    beyond the host tensors (and what their graphs saved), and Python's small objects (a block
    of its allocator each, ~32 bytes) — not resident memory, which creeps up for tens of steps
    in a loop that keeps nothing."""
    global _counted, _first_seen
    if _counted is not None:
        return
    outside = _outside_tensors(result)
    if _first_seen is None:
        _first_seen = outside
    elif outside - _first_seen >= _COUNT_AFTER_BYTES:
        _counted = (step, _object_counts())


def _outside_tensors(result):
    from . import _host

    heap = 0
    mallinfo2 = _host.readers.mallinfo2
    if mallinfo2 is not None:
        info = mallinfo2()
        heap = info.uordblks + info.hblkhd
    tensors = sum(h["bytes"] + h["graph_bytes"] for h in result["holders"] if h["device"] is None)
    return heap - tensors + _BLOCK_BYTES * sys.getallocatedblocks()


def _object_counts():
    # The types listed first, then counted: a third faster than counting from the iterator
    # (389 k objects: 33 ms against 49 ms; `gc.get_objects()` itself is 34 ms more).
    return Counter(list(map(type, gc.get_objects())))


def object_growth(deadline_ns):
    """At the last census (the job's end or its out-of-memory error): the types whose objects grew
    most since they were counted, and the module-level containers (a global, or an attribute of a
    class, of any module: ``matplotlib._pylab_helpers.Gcf.figs``) whose items are of a type that
    grew — what keeps memory that is not in tensors. ``None`` where they were not counted."""
    if _counted is None:
        return None
    since, before = _counted
    now = _object_counts()
    growth = {k: n - before.get(k, 0) for k, n in now.items() if n > before.get(k, 0)}
    # The job's and its libraries' types first (Python's own lists and dicts grow with anything).
    most = sorted(growth, key=lambda k: (getattr(k, "__module__", None) != "builtins", growth[k]),
                  reverse=True)[:_OBJECTS_SENT]
    result = {
        "since_step": since,
        "types": [{"type": _type_name(k), "before": before.get(k, 0), "now": now[k]} for k in most],
        "containers": [],
    }
    # The containers of the objects of types that grew, other than Python's own (a list of lists
    # holds what grew too, but names no one).
    growth = {k: g for k, g in growth.items() if getattr(k, "__module__", None) != "builtins"}
    if growth:
        result["containers"] = _containers_of(growth, deadline_ns)
    return result


def _containers_of(growth, deadline_ns):
    """The containers of the modules of the packages whose types grew (pyplot's figure manager is
    matplotlib's), of ``__main__`` and of the job's own modules."""
    found = []
    seen = set()
    packages = {getattr(k, "__module__", "").partition(".")[0] for k in growth}
    main = sys.modules.get("__main__")
    modules = [(name, module) for name, module in list(sys.modules.items())
               if name.partition(".")[0] in packages]
    if main is not None:
        modules.append(("__main__", main))
    modules.extend(_job_modules(main, _libraries()))
    for name, module in modules:
        if time.perf_counter_ns() > deadline_ns:
            break
        if module is None or name.startswith("tidemark"):
            continue
        try:
            attrs = object.__getattribute__(module, "__dict__")
        except Exception:
            continue
        if type(attrs) is not dict:
            continue
        for var, value in list(attrs.items()):
            kind = type(value)
            if kind is type and getattr(value, "__module__", None) == name:
                try:
                    items = list(vars(value).items())
                except Exception:
                    continue
                for attr, held in items:
                    if issubclass(type(held), _CONTAINER_TYPES):
                        _note_container(held, f"{name}.{var}.{attr}", f"a class attribute of {var}",
                                        growth, seen, found)
            elif issubclass(kind, _CONTAINER_TYPES):
                _note_container(value, f"{name}.{var}", f"a global of {name}", growth, seen, found)
    # The containers that hold most of what grew first.
    found.sort(key=lambda c: min(c["items"], c["grew"]), reverse=True)
    return found[:_CONTAINERS_SENT]


def _note_container(container, path, what, growth, seen, found):
    """Notes `container` where its last items are of a type that grew."""
    if id(container) in seen:
        return
    seen.add(id(container))
    try:
        size = len(container)
        if not size:
            return
        if issubclass(type(container), dict):
            values = list(container.values())[-_CONTAINER_SAMPLE:]
        elif type(container) is set:
            values = list(container)[:_CONTAINER_SAMPLE]
        else:
            values = list(container)[-_CONTAINER_SAMPLE:]
    except Exception:
        return
    kinds = {}
    for value in values:
        kind = type(value)
        if kind in growth:
            kinds[kind] = kinds.get(kind, 0) + 1
    if not kinds:
        return
    kind = max(kinds, key=kinds.get)
    # Most of its items are of the type, and there are enough of them for half of its growth.
    if 2 * kinds[kind] >= len(values) and 2 * size >= growth[kind]:
        found.append({"name": path, "what": f"{type(container).__name__}, {what}", "items": size,
                      "holds": _type_name(kind), "grew": growth[kind]})


def encode(result):
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False)
