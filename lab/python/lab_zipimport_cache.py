"""LAB HOSTS ONLY (mounted by lab/up.sh and the molecule platforms; never on a real host): a bytecode cache
for the Python modules a lab host imports from a zip file.

Ansible runs each module on a host as an AnsiballZ zip, and Python's zipimport compiles every source in it
(ansible.module_utils.basic and the project's module_utils) on every run: about a third of a module run's CPU,
and a lab rollout runs about a hundred modules on its host. Python caches the bytecode of every other import
(__pycache__); this caches these the same way, keyed by Python's magic number and the source's bytes, so an
edited source is compiled again. What runs is unchanged: the same code object, its file name set to the zip it
was imported from (tracebacks name the real zip). Any failure to read or write the cache falls back to
compiling, as Python does without it.
"""

import _imp
import marshal
import os
import zipimport

CACHE = os.environ.get("LAB_ZIPIMPORT_CACHE", "/var/cache/lab-zipimport")
_compile = zipimport._compile_source


def compile_source(pathname, source):
    """zipimport's compile step, through the cache."""
    # Imported here, not at start-up: every Python on a lab host loads this file, most never import from a zip.
    import hashlib
    import importlib.util

    path = os.path.join(CACHE, hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest())
    try:
        with open(path, "rb") as handle:
            code = marshal.load(handle)
        _imp._fix_co_filename(code, pathname)
        return code
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(partial, path)  # whole or absent: a reader never sees a partial entry
    except OSError:
        pass
    return code


zipimport._compile_source = compile_source
