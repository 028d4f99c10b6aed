"""grpo-doctor's zero-code instrumentation, loaded by Python at start-up from PYTHONPATH.

`grpo-doctor watch --instrument` puts this file's directory first on the job's PYTHONPATH and sets
GRPO_DOCTOR_INSTRUMENT=1. Python imports `sitecustomize` at start-up, so every Python process of
the job loads this file, and it must cost next to nothing in the many that never touch torch (pip,
compile workers, Ray's idle workers). So it imports nothing beyond what start-up has loaded, never
grpo_doctor, and only adds a finder to `sys.meta_path`: when one of `TARGETS` is first imported,
the module is executed as usual and then handed to `grpo_doctor.rank.auto.patch_module`, which
wraps it. A module name that is not a target costs one set lookup per import.

This file shadows any other `sitecustomize` on the path (Debian ships one); that one is run first,
as Python would have run it, and it is what `import sitecustomize` gives from then on (its
attributes are where the user put them), so the user's environment is unchanged.

Every interpreter that finds the directory on PYTHONPATH reads this file, Python 2.7 and old 3.x
included (a job's helper script, a system tool): its syntax is valid in all of them (no f-strings,
annotations or keyword-only arguments; tests/rank/test_instrument_unchanged.py compiles it with
Python 2.7), and an interpreter older than grpo_doctor supports only runs the shadowed
sitecustomize, silently.

Nothing here may raise: a failure turns the instrumentation off with one line on stderr.

Typical use:
    PYTHONPATH=$(python -m grpo_doctor.rank.auto --path):$PYTHONPATH GRPO_DOCTOR_INSTRUMENT=1 python train.py
"""
# ruff: noqa: UP031 - %-formatting on purpose: Python 2.7 and 3.5 read this file too (no f-strings)
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
SUPPORTED = (3, 10)  # grpo_doctor's requires-python: older interpreters get no import hook
_ON = ("1", "true", "yes", "on")

chained = None  # the sitecustomize module this one shadows, after it ran
_off = False
_this = sys.modules.get(__name__)  # kept here: once the shadowed one ran, sys.modules names that one


def _say_off(cause):
    global _off
    _off = True
    try:
        sys.stderr.write("grpo-doctor: zero-code instrumentation is off in this process (pid %d): %s\n"
                         % (os.getpid(), cause))
    except Exception:  # noqa: BLE001 - no stderr (a daemon): nothing to tell
        pass


def _run_shadowed():
    """Run the next `sitecustomize` on sys.path as site.py would have, errors reported as site.py does;
    it becomes sys.modules["sitecustomize"], as if it had been the one imported."""
    global chained
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib.machinery
        import importlib.util
        module_from_spec = importlib.util.module_from_spec
    except (ImportError, AttributeError):  # Python 2, or 3 before 3.5
        _run_shadowed_imp(rest)
        return
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module  # as an import does: the module may look itself up
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - site.py's own wording and behaviour
        _restore_self()
        err = sys.exc_info()[1]
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                             % (type(err).__name__, err))
        return
    chained = module


def _run_shadowed_imp(rest):
    """Python 2's site.py: an ImportError is silent, any other error one line."""
    global chained
    import imp

    try:
        found = imp.find_module("sitecustomize", rest)
    except ImportError:
        return
    try:
        sys.modules.pop("sitecustomize", None)
        try:
            chained = imp.load_module("sitecustomize", *found)
        finally:
            if found[0] is not None:
                found[0].close()
    except ImportError:
        _restore_self()
    except Exception:  # noqa: BLE001
        _restore_self()
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("'import sitecustomize' failed; use -v for traceback\n")


def _restore_self():
    if _this is not None:
        sys.modules["sitecustomize"] = _this
    else:
        sys.modules.pop("sitecustomize", None)


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
        _say_off("patching %s failed (%s: %s)" % (name, type(exc).__name__, exc))


class PostImportFinder:
    """A meta-path finder that finds nothing itself: it asks the finders after it, and wraps the loader."""

    def __init__(self):
        self._finding = set()
        self._home = _this  # this module, which sys.modules may no longer name

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
            _say_off("finding %s failed (%s: %s)" % (fullname, type(exc).__name__, exc))
            return None
        finally:
            self._finding.discard(fullname)


def _install():
    try:
        _run_shadowed()
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write("grpo-doctor: could not run the sitecustomize this one shadows (%s: %s)\n"
                         % (type(exc).__name__, exc))
    if sys.version_info < SUPPORTED:
        return  # grpo_doctor cannot run here: nothing to install, nothing to say
    env = os.environ
    if env.get(INSTRUMENT_ENV, "").strip().lower() not in _ON or env.get(DISABLE_ENV, "").strip().lower() in _ON:
        return
    try:
        sys.meta_path.insert(0, PostImportFinder())
    except Exception as exc:  # noqa: BLE001
        _say_off("installing the import hook failed (%s: %s)" % (type(exc).__name__, exc))


_install()
