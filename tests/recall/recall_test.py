"""scripts/recall's own logic with its verify-megatron runs stood in for: the verdicts (caught,
caught on a case its control passes, missed, a stated limit, an error), the lost catches that
make it exit 1, the one-line case and message, and the bad input that makes it exit 2.
Cost: well under a second (no tree is made, no worker starts)."""
import importlib.machinery
import io
import json
import os
import sys
import tempfile
import contextlib

HERE = os.path.dirname(os.path.abspath(__file__))
recall = importlib.machinery.SourceFileLoader(
    "recall", os.path.join(HERE, "..", "..", "scripts", "recall")).load_module()


def entry(gid="G01"):
    return {"id": gid, "archive": "/s/megatron-lm-x.tar.gz", "base": ["/p/pr6982.patch"],
            "patch": "/h/%s-bug.patch" % gid, "variant": "patched", "left_out": {},
            "snapshot": "x"}


def run(*failing, passing=("A.B",)):
    props = [{"name": n, "passed": False, "counterexample": "CaseSpec{dp=2 cpu_offload=1 "
              "params=[p0:bf16[3] g0 c0]}\nSchedule{1}", "failure":
              "Exception thrown with message:\nKeyError: 3\nTraceback\nKeyError: 3",
              "reproduce": "R" + n, "cases": 4} for n in failing]
    props += [{"name": n, "passed": True, "cases": 50} for n in passing]
    return {"properties": props, "seconds": 1.0}


def check_verdicts():
    e = entry()
    recall.judge(e, run("P.One", "P.Two"), run("P.Two"), {}, lambda p, beside: None)
    assert e["verdict"] == "caught", e
    assert [c["property"] for c in e["caught_by"]] == ["P.One"], e
    assert e["masked_by_control"] == ["P.Two"], e
    assert e["caught_by"][0]["case"] == "dp=2 cpu_offload=1 params=[p0:bf16[3] g0 c0]", e
    assert e["caught_by"][0]["message"] == "KeyError: 3", e
    assert "--patch /h/G01-bug.patch --real-ranks patched --only P.One" in \
        e["caught_by"][0]["replay"], e
    e = entry()
    recall.judge(e, run("P.Two"), run("P.Two"), {},
                 lambda p, beside: p if beside and p["name"] == "P.Two" else None)
    assert e["verdict"] == "caught" and e["caught_by"][0]["control_fails_other_cases"], e
    e = entry()
    recall.judge(e, run("P.Two"), run("P.Two"), {}, lambda p, beside: None)
    assert e["verdict"] == "missed" and e["masked_by_control"] == ["P.Two"], e
    e = entry("G12")
    limit = {"reason": "needs two GPUs", "evidence": "ran X, printed Y"}
    recall.judge(e, run(), run(), {"G12": limit}, lambda p, beside: None)
    assert e["verdict"] == "a stated limit" and e["limit"] == limit, e
    e = entry()
    recall.judge(e, {"error": "no such tree", "exit": 2}, run(), {}, lambda p, beside: None)
    assert e["verdict"] == "error" and e["error"] == "no such tree", e


def check_message_line():
    """A real-code failure's log names the tree and its patches first; the row keeps the rest."""
    failure = ("Falsifiable\nx.cc:98:\nRC_ASSERT(!v)\nLog:\nmegatron megatron-lm-x.tar.gz with "
               "pr6982, F1, G02-bug: stub: reload_model_params: AttributeError: no groups")
    assert recall.message_line(failure) == "stub: reload_model_params: AttributeError: no groups"
    assert recall.message_line("Log:\nmegatron tree-all: it broke") == "megatron tree-all: it broke"
    written = ("case file: /tmp/run/P.json\nreplay: shardcheck-replay /tmp/run/P.json\n"
               "Exception thrown with message:\nAttributeError: no getter\nTraceback ...")
    assert recall.message_line(written) == "AttributeError: no getter", recall.message_line(written)


def check_lost_catches():
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"patches": [{"id": "G01", "verdict": "caught"},
                               {"id": "G02", "verdict": "caught"},
                               {"id": "G03", "verdict": "missed"}]}, f)
    now = {"patches": [{"id": "G01", "verdict": "missed"}, {"id": "G03", "verdict": "caught"}]}
    assert recall.regressions(now, f.name) == ["G01"], "G02 did not run; G03 is a gain"
    os.unlink(f.name)


def exit_status(argv):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            status = recall.main(argv)
        except SystemExit as e:
            status = e.code
    return status, err.getvalue()


def check_bad_input():
    with tempfile.TemporaryDirectory() as corpus:
        assert exit_status(["--corpus", os.path.join(corpus, "none")])[0] == 2
        assert exit_status(["--corpus", corpus])[0] == 2  # no GNN-*.patch
        with open(os.path.join(corpus, "G01-x.patch"), "w") as f:
            f.write("diff --git a/x b/x\n")
        status, err = exit_status(["--corpus", corpus])
        assert status == 2 and "no corpus header" in err, err
        with open(os.path.join(corpus, "G01-x.patch"), "w") as f:
            f.write("# G01 x\n# Tree: megatron-lm-nowhere (paths)\n# Bug: it breaks.\n#\n")
        status, err = exit_status(["--corpus", corpus, "--work", os.path.join(corpus, "w")])
        assert status == 2 and "no snapshot" in err, err
        status, err = exit_status(["--corpus", corpus, "--only", "G02"])
        assert status == 2 and "no corpus patch G02" in err, err
        assert exit_status(["--corpus", corpus, "--kill"])[0] == 2
        assert exit_status(["--corpus", corpus, "--cases", "0"])[0] == 2


CHECKS = (check_verdicts, check_message_line, check_lost_catches, check_bad_input)
for check in CHECKS:
    check()
    print("ok", check.__name__)
print(f"{len(CHECKS)} passed, 0 failed")
