"""Loaded by Python at start-up because the collector put this folder first on PYTHONPATH.

It runs the job's own sitecustomize (if there is one further along the path), then starts the
tidemark probe. Nothing here may break the job: every failure is swallowed.
"""
import os
import sys


def _chain_to_the_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _chain_to_the_next_sitecustomize()
except Exception as error:  # the job's own sitecustomize failed: say so, as Python would
    print(f"tidemark: the job's sitecustomize failed: {error!r}", file=sys.stderr)

try:
    import tidemark

    tidemark._start_from_environment()
except Exception as error:
    print(f"tidemark: probe not started: {error!r}", file=sys.stderr)
