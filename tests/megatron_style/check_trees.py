"""Checks every Megatron-style test file against the trees of scripts/megatron-trees.

    check_trees.py TREES [NAME]

A file named test_<id>_*.py belongs to the patch <id> (pr6982, f1, ..., f12). On each tree the
file must pass exactly when the tree carries that patch: NAME (default d8b71082) has none,
NAME-pr6982 the seed fix, NAME-pr6982-FN the seed fix and FN's patch, NAME-pr6982-all every one.
pytest runs twice per tree, with Transformer Engine's FusedAdam and without it
(--megatron-without-te), each time in a process of its own (the device layer is installed per
process). A collection error is wrong on every tree.
A file whose every case is skipped on a tree (a test that needs a real GPU, say) decides nothing
there: it is listed with the skip's reason, not counted as passing.
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


def pytest_command(tree, without_te, report=None):
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", HERE,
               f"--megatron-tree={tree}"] + (["--megatron-without-te"] if without_te else [])
    return command + ([f"--junitxml={report}"] if report else [])


def outcomes(tree, without_te):
    """({file: "failed", "passed" or "skipped: reason"} on `tree`, pytest's exit status); a file
    is skipped when every case of it is."""
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "report.xml")
        env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONDONTWRITEBYTECODE="1")
        run = subprocess.run(pytest_command(tree, without_te, report), env=env, capture_output=True,
                             text=True, check=False)
        if run.returncode not in (0, 1):
            sys.stdout.write(run.stdout + run.stderr)
            return None, run.returncode
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
        return found, run.returncode


def check_tree(tree, carried, files, without_te):
    """The wrong outcomes on one tree, as printable lines."""
    found, status = outcomes(tree, without_te)
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
    wrong = []
    for tree, carried in trees(argv[1], argv[2] if len(argv) == 3 else "d8b71082", files):
        for without_te in (False, True):
            outcome = check_tree(tree, carried, files, without_te)
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
