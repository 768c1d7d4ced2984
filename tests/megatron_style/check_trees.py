"""Checks every Megatron-style test file against the trees of scripts/megatron-trees.

    check_trees.py TREES [NAME]

A file named test_<id>_*.py belongs to the patch <id> (pr6982, f1, ..., f16). On each tree the
file must pass exactly when the tree carries that patch: NAME (default d8b71082) has none,
NAME-pr6982 the seed fix, NAME-pr6982-FN the seed fix and FN's patch, NAME-pr6982-all every one.
A finding that patches/NAME/FN.fixed-upstream names as fixed in NAME has no NAME-pr6982-FN tree
(scripts/megatron-trees makes none): its file must pass on every tree of NAME.
pytest runs twice per tree, with Transformer Engine's FusedAdam and without it
(--megatron-without-te), each time in a process of its own, as the device layer is installed per
process: a child forked from this one, which imports torch and pytest once for all the runs (a
fresh interpreter would spend half its time importing them), calls pytest.main. A collection
error is wrong on every tree.
A file whose every case is skipped on a tree (a test that needs a real GPU, say) decides nothing
there: it is listed with the skip's reason, not counted as passing.
Exit 0 when every outcome is the expected one, 1 otherwise, 2 on bad input; each wrong outcome is
printed with the command that replays it.
"""

import contextlib
import importlib
import os
import re
import signal
import sys
import tempfile
import traceback
import warnings
import xml.etree.ElementTree as ElementTree

HERE = os.path.dirname(os.path.abspath(__file__))
PATCHES = os.path.join(HERE, os.pardir, os.pardir, "patches")
FILE_PATTERN = re.compile(r"^test_(pr6982|f\d+)_\w+\.py$")
SKIPPED = {}  # file: the reason, for files skipped on some tree
DECIDED = set()  # files that passed or failed on some tree


def test_files():
    """{patch id: file name} for every test file of this folder."""
    files = {}
    for name in sorted(os.listdir(HERE)):
        match = FILE_PATTERN.match(name)
        if match:
            files[match.group(1)] = name
    return files


def fixed_upstream(name, ids):
    """The patch ids of the findings that patches/NAME/FN.fixed-upstream names as fixed in NAME."""
    return {i for i in ids if i != "pr6982"
            and os.path.isfile(os.path.join(PATCHES, name, f"{i.upper()}.fixed-upstream"))}


def required(patch_id):
    """The ids of the patches the header of finding `patch_id`'s patch requires ("Requires: F13"),
    which its tree carries too (scripts/megatron-trees)."""
    for file in os.listdir(PATCHES):
        if file.startswith(f"{patch_id.upper()}-") and file.endswith(".patch"):
            with open(os.path.join(PATCHES, file), encoding="utf-8") as f:
                header = f.read().split("\ndiff --git", 1)[0]
            return {r.lower() for line in header.splitlines() if line.startswith("Requires: ")
                    for r in line.split()[1:]}
    return set()


def trees(root, name, ids):
    """[(tree path, set of patch ids it carries)] for every tree that exists; a finding fixed
    upstream counts as carried by every tree."""
    fixed = fixed_upstream(name, ids)
    findings = [i for i in ids if i != "pr6982" and i not in fixed]
    wanted = [(name, set()), (f"{name}-pr6982", {"pr6982"})]
    wanted += [(f"{name}-pr6982-{f.upper()}", {"pr6982", f, *required(f)}) for f in findings]
    wanted.append((f"{name}-pr6982-all", set(ids)))
    found = [(os.path.join(root, t), carried | fixed) for t, carried in wanted]
    missing = [t for t, _ in found if not os.path.isdir(t)]
    if missing:
        sys.exit(f"check_trees: missing trees (run scripts/megatron-trees): {' '.join(missing)}")
    return found


def pytest_command(tree, without_te, report=None):
    """The command that runs pytest on `tree`, as a shell would run it."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", HERE,
               f"--megatron-tree={tree}"] + (["--megatron-without-te"] if without_te else [])
    return command + ([f"--junitxml={report}"] if report else [])


def import_pytest():
    """Imports torch and pytest once, in the setting of `python3 -m pytest` with
    PYTHONWARNINGS=ignore and PYTHONDONTWRITEBYTECODE=1, and returns pytest; the children forked
    afterwards start with both. No torch op runs here, nor conftest or sim/megatron (the device
    layer is the child's), so no thread pool exists when this process forks."""
    os.environ.update(PYTHONWARNINGS="ignore", PYTHONDONTWRITEBYTECODE="1")
    sys.warnoptions.append("ignore")  # as with PYTHONWARNINGS, pytest adds no "always" filter
    warnings.simplefilter("ignore")
    sys.dont_write_bytecode = True
    sys.path[0] = os.getcwd()  # where `python3 -m` puts it, instead of this script's folder
    importlib.import_module("torch")
    return importlib.import_module("pytest")


def run_child(pytest, arguments, output):
    """In the forked child: pytest.main(arguments) with file descriptors 1 and 2 on `output`;
    exits with pytest's status (3, its internal error, if pytest.main raises) and never returns."""
    status = 3
    try:
        os.setpgid(0, 0)  # its own process group, which run_pytest ends with it
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        status = int(pytest.main(arguments))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def run_pytest(pytest, arguments, output_path):
    """(pytest's exit status, its output) for pytest.main(arguments) in a forked child, which
    writes its output to `output_path`; the status is -N if signal N killed the child. What the
    child left running in its process group is killed: where psutil is installed, Megatron's
    asynchronous torch_dist writer starts a worker process (and multiprocessing's resource
    tracker) that the child's os._exit leaves behind."""
    with open(output_path, "wb") as output:
        sys.stdout.flush()  # else the child would inherit, and write again, what is buffered
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            run_child(pytest, arguments, output)
        try:
            _, wait_status = os.waitpid(child, 0)
        except BaseException:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            raise
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGKILL)
    with open(output_path, "rb") as output:
        return os.waitstatus_to_exitcode(wait_status), output.read().decode(errors="replace")


def outcomes(pytest, tree, without_te):
    """({file: "failed", "passed" or "skipped: reason"} on `tree`, pytest's exit status); a file
    is skipped when every case of it is."""
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "report.xml")
        arguments = pytest_command(tree, without_te, report)[3:]  # after python3 -m pytest
        status, output = run_pytest(pytest, arguments, os.path.join(scratch, "output.txt"))
        if status not in (0, 1):
            sys.stdout.write(output)
            return None, status
        found = {}
        for case in ElementTree.parse(report).iter("testcase"):
            name = case.get("classname").split(".")[-1] + ".py"
            skipped = case.find("skipped")
            if case.find("error") is not None:
                found[name] = "error"
            elif case.find("failure") is not None and found.get(name) != "error":
                found[name] = "failed"
            elif skipped is None:
                found[name] = found.get(name) if found.get(name) in ("failed", "error") \
                    else "passed"
            elif name not in found:
                found[name] = "skipped: " + skipped.get("message", "")
        return found, status


def check_tree(pytest, tree, carried, files, without_te):
    """The wrong outcomes on one tree, as printable lines."""
    found, status = outcomes(pytest, tree, without_te)
    if found is None:
        return [f"{tree}: pytest exited {status} (not a test failure)"]
    tree += " (without TE)" if without_te else ""
    wrong = []
    for patch_id, name in files.items():
        outcome = found.get(name, "not collected")
        if outcome.startswith("skipped"):
            SKIPPED.setdefault(name, outcome)
            continue
        DECIDED.add(name)
        expected = "passed" if patch_id in carried else "failed"
        if outcome != expected:
            wrong.append(f"{tree}: {name} {outcome}, expected {expected}")
    return wrong


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    files = test_files()
    name = argv[2] if len(argv) == 3 else "d8b71082"
    for patch_id in sorted(fixed_upstream(name, files)):
        print(f"{files[patch_id]}: fixed upstream in {name} (patches/{name}/"
              f"{patch_id.upper()}.fixed-upstream), expected to pass on every tree")
    found = trees(argv[1], name, files)
    pytest = import_pytest()
    wrong = []
    for tree, carried in found:
        for without_te in (False, True):
            outcome = check_tree(pytest, tree, carried, files, without_te)
            print(f"{os.path.basename(tree)}{' without TE' if without_te else ''}: "
                  f"{'as expected' if not outcome else 'WRONG'}")
            wrong += outcome
    for name, reason in sorted(SKIPPED.items()):
        if name not in DECIDED:
            print(f"{name}: decides nothing here ({reason})")
    for line in wrong:
        print(line)
    if wrong:
        print("replay one tree with: " + " ".join(pytest_command("TREE", False)))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
