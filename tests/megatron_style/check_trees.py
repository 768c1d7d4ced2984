"""Checks every Megatron-style test file against the trees of scripts/megatron-trees.

    check_trees.py TREES [NAME]

A file named test_<id>_*.py belongs to the patch <id> (pr6982, f1, ..., f12). On each tree the
file must pass exactly when the tree carries that patch: NAME (default d8b71082) has none,
NAME-pr6982 the seed fix, NAME-pr6982-FN the seed fix and FN's patch, NAME-pr6982-all every one.
pytest runs once per tree, in a process of its own (the device layer is installed per process).
Exit 0 when every outcome is the expected one, 1 otherwise, 2 on bad input; each wrong outcome is
printed with the command that replays it.
"""

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

HERE = os.path.dirname(os.path.abspath(__file__))
FILE_PATTERN = re.compile(r"^test_(pr6982|f\d+)_\w+\.py$")


def test_files():
    """{patch id: file name} for every test file of this folder."""
    files = {}
    for name in sorted(os.listdir(HERE)):
        match = FILE_PATTERN.match(name)
        if match:
            files[match.group(1)] = name
    return files


def trees(root, name, ids):
    """[(tree path, set of patch ids it carries)] for every tree that exists."""
    findings = [i for i in ids if i != "pr6982"]
    wanted = [(name, set()), (f"{name}-pr6982", {"pr6982"})]
    wanted += [(f"{name}-pr6982-{f.upper()}", {"pr6982", f}) for f in findings]
    wanted.append((f"{name}-pr6982-all", set(ids)))
    found = [(os.path.join(root, t), ids) for t, ids in wanted]
    missing = [t for t, _ in found if not os.path.isdir(t)]
    if missing:
        sys.exit(f"check_trees: missing trees (run scripts/megatron-trees): {' '.join(missing)}")
    return found


def pytest_command(tree, report=None):
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", HERE,
               f"--megatron-tree={tree}"]
    return command + ([f"--junitxml={report}"] if report else [])


def failed_files(tree):
    """The test files with a failure or an error on `tree`, and pytest's exit status."""
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "report.xml")
        env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONDONTWRITEBYTECODE="1")
        run = subprocess.run(pytest_command(tree, report), env=env, capture_output=True,
                             text=True, check=False)
        if run.returncode not in (0, 1):
            sys.stdout.write(run.stdout + run.stderr)
            return None, run.returncode
        failed = set()
        for case in ElementTree.parse(report).iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.add(case.get("classname").split(".")[-1] + ".py")
        return failed, run.returncode


def check_tree(tree, carried, files):
    """The wrong outcomes on one tree, as printable lines."""
    failed, status = failed_files(tree)
    if failed is None:
        return [f"{tree}: pytest exited {status} (not a test failure)"]
    wrong = []
    for patch_id, name in files.items():
        should_pass = patch_id in carried
        if should_pass == (name in failed):
            verdict = "fails" if should_pass else "passes"
            wrong.append(f"{tree}: {name} {verdict}, expected the opposite")
    return wrong


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    files = test_files()
    wrong = []
    for tree, carried in trees(argv[1], argv[2] if len(argv) == 3 else "d8b71082", files):
        outcome = check_tree(tree, carried, files)
        print(f"{os.path.basename(tree)}: {'as expected' if not outcome else 'WRONG'}")
        wrong += outcome
    for line in wrong:
        print(line)
    if wrong:
        print("replay one tree with: " + " ".join(pytest_command("TREE")))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
