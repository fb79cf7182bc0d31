"""tensorgauge's hook, loaded by Python at start-up from the job's PYTHONPATH.

Loads the tensorgauge package from the monitor's installation (whatever
environment the job's Python uses), installs the import watcher, then runs the
``sitecustomize`` this one shadows, if any. Any failure leaves the job alone.
"""


def _load_tensorgauge():
    import importlib.util
    import os
    import sys

    if "tensorgauge" in sys.modules:
        return
    package_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "tensorgauge", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir])
    if spec is None or spec.loader is None:
        raise ImportError(f"no tensorgauge package in {package_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tensorgauge"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["tensorgauge"]
        raise


def _chain_next_sitecustomize():
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = sys.path[:]
    saved_module = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


def _start():
    import os

    try:
        _load_tensorgauge()
        from tensorgauge.hook.protocol import NO_HOOK_ENV

        if os.environ.get(NO_HOOK_ENV):
            return
        from tensorgauge.hook import install

        install()
    except Exception as exc:  # never break the job
        import sys

        print(f"tensorgauge: hook not loaded ({exc})", file=sys.stderr)


_start()
try:
    _chain_next_sitecustomize()
except Exception:
    pass

