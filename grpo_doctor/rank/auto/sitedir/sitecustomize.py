"""grpo-doctor's zero-code instrumentation, loaded by Python at start-up from PYTHONPATH.

`grpo-doctor watch --instrument` puts this file's directory first on the job's PYTHONPATH and sets
GRPO_DOCTOR_INSTRUMENT=1. Python imports `sitecustomize` at start-up, so every Python process of
the job loads this file, and it must cost next to nothing in the many that never touch torch (pip,
compile workers, Ray's idle workers). So it imports nothing beyond what start-up has loaded, never
grpo_doctor, and only adds a finder to `sys.meta_path`: when one of `TARGETS` is first imported,
the module is executed as usual and then handed to `grpo_doctor.rank.auto.patch_module`, which
wraps it. A module name that is not a target costs one set lookup per import.

This file shadows any other `sitecustomize` on the path (Debian ships one); that one is run first,
as Python would have run it, so the user's environment is unchanged.

Nothing here may raise: a failure turns the instrumentation off with one line on stderr.

Typical use:
    PYTHONPATH=$(python -m grpo_doctor.rank.auto --path):$PYTHONPATH GRPO_DOCTOR_INSTRUMENT=1 python train.py
"""
import os
import sys

INSTRUMENT_ENV = "GRPO_DOCTOR_INSTRUMENT"
DISABLE_ENV = "GRPO_DOCTOR_DISABLE"
# The modules that grpo_doctor.rank.auto.TARGETS patches (a test keeps the two equal).
TARGETS = frozenset({
    "torch.distributed",
    "torch.optim.optimizer",
    "transformers.generation.utils",
    "vllm.entrypoints.llm",
    "sglang.srt.entrypoints.engine",
})
_ON = ("1", "true", "yes", "on")

chained = None  # the sitecustomize module this one shadows, after it ran
_off = False


def _say_off(cause):
    global _off
    _off = True
    try:
        sys.stderr.write(f"grpo-doctor: zero-code instrumentation is off in this process (pid {os.getpid()}): "
                         f"{cause}\n")
    except Exception:  # noqa: BLE001 - no stderr (a daemon): nothing to tell
        pass


def _run_shadowed():
    """Run the next `sitecustomize` on sys.path, as site.py would have, errors reported as site.py does."""
    global chained
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - site.py's own wording and behaviour
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(err).__name__}: {err}\n")
        return
    chained = module


class _PatchingLoader:
    """The real loader, then the patch; everything else is the real loader's."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module sees its real loader while it runs, and keeps it: only the patch is ours.
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        self._loader.exec_module(module)
        _patch(self._name, module)


def _patch(name, module):
    if _off:
        return
    try:
        from grpo_doctor.rank.auto import patch_module

        patch_module(name, module)
    except Exception as exc:  # noqa: BLE001 - grpo_doctor missing or broken: the job goes on without it
        _say_off(f"patching {name} failed ({type(exc).__name__}: {exc})")


class PostImportFinder:
    """A meta-path finder that finds nothing itself: it asks the finders after it, and wraps the loader."""

    def __init__(self):
        self._finding = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in TARGETS or fullname in self._finding or _off:
            return None
        self._finding.add(fullname)
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _PatchingLoader(spec.loader, fullname)
            return spec
        except Exception as exc:  # noqa: BLE001
            _say_off(f"finding {fullname} failed ({type(exc).__name__}: {exc})")
            return None
        finally:
            self._finding.discard(fullname)


def _install():
    try:
        _run_shadowed()
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"grpo-doctor: could not run the sitecustomize this one shadows ({type(exc).__name__}: {exc})\n")
    env = os.environ
    if env.get(INSTRUMENT_ENV, "").strip().lower() not in _ON or env.get(DISABLE_ENV, "").strip().lower() in _ON:
        return
    try:
        sys.meta_path.insert(0, PostImportFinder())
    except Exception as exc:  # noqa: BLE001
        _say_off(f"installing the import hook failed ({type(exc).__name__}: {exc})")


_install()
