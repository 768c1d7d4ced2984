"""scripts/finding-report's two measurements of one finding on a tree, the case file replayed and
the Megatron-style test run: when they disagree, the report says in words why both hold (each
checks one form of the finding) and which form the tree shows; when they agree it adds nothing.

The replays and the pytest runs are stood in for (`run` returns the exit status the test sets),
so the words are checked on every combination without a tree."""

import importlib.machinery
import importlib.util
import os
import sys
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_report():
    sys.dont_write_bytecode = True  # no __pycache__ beside the script
    path = os.path.join(ROOT, "scripts", "finding-report")
    loader = importlib.machinery.SourceFileLoader("finding_report", path)
    spec = importlib.util.spec_from_loader("finding_report", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class Reconciliation(unittest.TestCase):
    def setUp(self):
        self.report = load_report()
        self.args = types.SimpleNamespace(tree="/no/tree", build="/no/build")

    def measured(self, case_status, test_status):
        """F3's lines when its case replay exits `case_status` and its pytest `test_status`."""
        def run(command, env):
            if "pytest" in command:
                word = "failed" if test_status == 1 else "passed"
                return test_status, [f"1 {word} in 0.5s"]
            return case_status, ["replayed"]
        self.report.run = run
        return "\n".join(self.report.measured("F3", self.args))

    def test_a_present_case_and_a_passing_test_are_reconciled_in_words(self):
        text = self.measured(case_status=1, test_status=0)
        self.assertIn("The measurements disagree, and both hold", text)
        self.assertIn("replays `HybridOptimizerState.CommandSequencesMatchTheReference` on its "
                      "shrunk case: present on this tree", text)
        self.assertIn("test_f3_hdo_reload_keeps_stale_host_copies.py` checks \"", text)
        self.assertIn(": not present. The finding is present in the first form", text)

    def test_the_other_way_round_names_the_test_as_the_present_form(self):
        text = self.measured(case_status=0, test_status=1)
        present, absent = text.split(": present on this tree.")
        self.assertIn("test_f3_hdo_reload_keeps_stale_host_copies.py", present)
        self.assertIn("f3_hdo_reload_keeps_stale_host_copies.json", absent)

    def test_agreeing_measurements_add_no_reconciliation(self):
        for status in (0, 1):
            self.assertNotIn("disagree", self.measured(case_status=status, test_status=status))

    def test_a_case_that_cannot_run_is_not_a_disagreement(self):
        self.assertNotIn("disagree", self.measured(case_status=2, test_status=0))


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
