"""The lab hosts' bytecode cache for zip imports (lab/python/lab_zipimport_cache.py): a source compiled once is
loaded from the cache from another zip, named after the zip it was imported from; an edited source is compiled
again; an unwritable cache only costs the compile. Each case runs in a Python of its own (the cache patches
zipimport process-wide, as the .pth file does on a lab host)."""

import json
import subprocess
import sys
import zipfile

from conftest import REPO

SHIM = REPO / "lab" / "python" / "lab_zipimport_cache.py"
# Imports each zip's module `m` and says how many sources were compiled, and where the
# function's code says it comes from (a traceback's file name).
IMPORTER = """
import importlib.util, json, sys, zipimport
spec = importlib.util.spec_from_file_location("lab_zipimport_cache", sys.argv[1])
shim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(shim)
compiled = []
compile_ = shim._compile
shim._compile = lambda pathname, source: compiled.append(pathname) or compile_(pathname, source)
files = []
for archive in sys.argv[2:]:
    found = zipimport.zipimporter(archive).find_spec("m")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    files.append(module.answer.__code__.co_filename)
print(json.dumps({"compiled": compiled, "files": files}))
"""


def zip_with(path, source):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("m.py", source)
    return str(path)


def run(cache, *archives):
    result = subprocess.run([sys.executable, "-c", IMPORTER, str(SHIM), *archives], capture_output=True, text=True,
                            env={"LAB_ZIPIMPORT_CACHE": str(cache)}, check=True)
    return json.loads(result.stdout)


def test_a_source_is_compiled_once_and_named_after_the_zip_it_comes_from(tmp_path):
    source = "def answer():\n    return 42\n"
    first, second = zip_with(tmp_path / "a.zip", source), zip_with(tmp_path / "b.zip", source)
    cold = run(tmp_path / "cache", first)
    warm = run(tmp_path / "cache", second, first)
    assert cold == {"compiled": [f"{first}/m.py"], "files": [f"{first}/m.py"]}, cold
    assert warm == {"compiled": [], "files": [f"{second}/m.py", f"{first}/m.py"]}, warm
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_an_edited_source_is_compiled_again(tmp_path):
    run(tmp_path / "cache", zip_with(tmp_path / "a.zip", "def answer():\n    return 42\n"))
    edited = zip_with(tmp_path / "b.zip", "def answer():\n    return 43\n")
    assert run(tmp_path / "cache", edited)["compiled"] == [f"{edited}/m.py"]
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_a_cache_that_cannot_be_written_only_costs_the_compile(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    archive = zip_with(tmp_path / "a.zip", "def answer():\n    return 42\n")
    compiled = run(tmp_path / "file" / "cache", archive, archive)["compiled"]
    # every import compiles again (zipimport compiles a source when it finds it and when it runs it)
    assert set(compiled) == {f"{archive}/m.py"} and len(compiled) >= 2, compiled
