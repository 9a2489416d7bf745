"""Automatic phases for PyTorch: installed when (and if) the job imports torch.

- forward / eval: a call of a root model (a module with parameters, called from outside any other
  module). It is eval when gradients are off, in inference mode, or when the model is in eval mode.
  Roots are found with global forward hooks until the first optimizer step; from then on only the
  roots are hooked, so the cost does not grow with the model.
- backward: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped.
  No global backward hooks: they break in-place operations.
- optimizer: the optimizer step pre and post hooks. Each optimizer step ends a training step.
"""
import importlib.abc
import importlib.machinery
import sys

import tidemark

_roots = {}
_depth = 0
_global_handles = []
_discovering = True


def install_when_torch_is_imported():
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds torch with the other finders, and runs the installer once torch has loaded."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            try:
                _install(module)
            except Exception as error:
                print(f"tidemark: automatic phases not installed: {error!r}", file=sys.stderr)

        loader.exec_module = exec_then_install
        return spec


def _install(torch):
    tidemark._torch = torch
    if tidemark._step is None:
        tidemark._step = 0
    from torch.nn.modules import module as nn_module

    _global_handles.append(nn_module.register_module_forward_pre_hook(_global_pre))
    _global_handles.append(nn_module.register_module_forward_hook(_global_post))

    backward = torch.autograd.backward

    def backward_in_phase(*args, **kwargs):
        tidemark.begin("backward")
        try:
            return backward(*args, **kwargs)
        finally:
            tidemark.end("backward")

    torch.autograd.backward = backward_in_phase

    from torch.optim import optimizer

    optimizer.register_optimizer_step_pre_hook(_optimizer_pre)
    optimizer.register_optimizer_step_post_hook(_optimizer_post)


def _is_model(module):
    for _ in module.parameters():
        return True
    return False


def _mode(module):
    torch = tidemark._torch
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not module.training:
        return "eval"
    return "forward"


def _global_pre(module, args):
    global _depth
    if _depth == 0 and (id(module) in _roots or _is_model(module)):
        _roots[id(module)] = module
        _root_pre(module, args)
    _depth += 1


def _global_post(module, args, output):
    global _depth
    _depth -= 1
    if _depth == 0 and id(module) in _roots:
        _root_post(module, args, output)


_open = {}


def _root_pre(module, args):
    name = _mode(module)
    _open[id(module)] = name
    tidemark.begin(name)


def _root_post(module, args, output):
    name = _open.pop(id(module), None)
    if name is not None:
        tidemark.end(name)


def _stop_discovering():
    """After the first step: hook only the roots found, drop the global hooks."""
    global _discovering
    _discovering = False
    for handle in _global_handles:
        handle.remove()
    _global_handles.clear()
    for module in _roots.values():
        module.register_forward_pre_hook(_root_pre)
        module.register_forward_hook(_root_post)


def _optimizer_pre(opt, args, kwargs):
    tidemark.begin("optimizer")


def _optimizer_post(opt, args, kwargs):
    tidemark.end("optimizer")
    if not tidemark._manual_step:
        tidemark._step = (tidemark._step or 0) + 1
    if _discovering:
        _stop_discovering()
