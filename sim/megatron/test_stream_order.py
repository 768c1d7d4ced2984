"""Self-test of the stream-order checker (stream_order.py) on the host CUDA stand-in:

    $(scripts/python-env) sim/megatron/test_stream_order.py

Literal schedules, each with and without the wait that orders it: the checker must report the
race exactly when the wait is missing. Exits 0 when every check holds.
"""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import devices  # noqa: E402
import stream_order  # noqa: E402

devices.install_cuda_stand_in()


def _accelerator(values):
    return torch.tensor(values, dtype=torch.float32, device="cuda")


class StreamOrderTest(unittest.TestCase):

    def assert_races(self, checker, *words):
        self.assertEqual(len(checker.races), 1, checker.report())
        for word in words:
            self.assertIn(word, checker.races[0])

    def assert_no_race(self, checker):
        self.assertEqual(checker.races, [], checker.report())

    def test_a_cast_on_a_side_stream_read_on_the_current_one(self):
        for wait in (False, True):
            grad, side = _accelerator([1.0, 2.0]).bfloat16(), torch.cuda.Stream()
            with stream_order.checked() as checker:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    cast = grad.to(torch.float32)
                if wait:
                    torch.cuda.current_stream().wait_stream(side)
                cast.mul_(2.0)
            if wait:
                self.assert_no_race(checker)
            else:
                self.assert_races(checker, "_to_copy", "wrote", "mul_", "the current stream")

    def test_an_event_orders_the_streams_it_joins(self):
        for wait in (False, True):
            x, side = _accelerator([1.0]), torch.cuda.Stream()
            with stream_order.checked() as checker:
                with torch.cuda.stream(side):
                    x.add_(1.0)
                    event = side.record_event()
                if wait:
                    event.wait(torch.cuda.current_stream())
                x.add_(1.0)
            self.assertEqual(checker.races != [], not wait, checker.report())

    def test_the_host_reads_a_device_to_host_copy_only_after_a_synchronize(self):
        for wait in (False, True):
            x, side = _accelerator([3.0]), torch.cuda.Stream()
            host = torch.empty(1, pin_memory=True)
            with stream_order.checked() as checker:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    host.copy_(x, non_blocking=True)
                    event = side.record_event()
                if wait:
                    event.synchronize()
                host.add_(1.0)
            self.assertEqual(checker.races != [], not wait, checker.report())

    def test_the_host_rewrites_a_host_to_device_source_only_after_a_synchronize(self):
        for wait in (False, True):
            x, host, side = _accelerator([3.0]), torch.ones(1), torch.cuda.Stream()
            with stream_order.checked() as checker:
                with torch.cuda.stream(side):
                    x.copy_(host, non_blocking=True)
                if wait:
                    side.synchronize()
                host.fill_(2.0)
            self.assertEqual(checker.races != [], not wait, checker.report())

    def test_blocking_copies_and_scalar_reads_wait_for_the_stream(self):
        x = _accelerator([1.0])
        with stream_order.checked() as checker:
            x.add_(1.0)
            copy = x.cpu()
            copy.add_(1.0)
            host = torch.zeros(1)
            host.copy_(x)
            host.add_(1.0)
            self.assertEqual(x.sum().item(), 2.0)
            x.copy_(host)  # blocking from host memory: the host may rewrite it at once
            host.fill_(0.0)
        self.assert_no_race(checker)

    def test_views_are_not_accesses_and_freed_memory_is_new(self):
        side = torch.cuda.Stream()
        x = _accelerator([1.0, 2.0, 3.0, 4.0])
        with stream_order.checked() as checker:
            with torch.cuda.stream(side):
                x[2:].add_(1.0)
                scratch = x[2:] * 2
                del scratch
            first = x[:2]
            first.add_(1.0)  # other bytes of the same tensor than the side stream wrote
            fresh = torch.empty(4, device="cuda")
            fresh.add_(1.0)
        self.assert_no_race(checker)

    def test_a_race_names_the_lines_that_issued_both_ops(self):
        x, side = _accelerator([1.0]), torch.cuda.Stream()
        with stream_order.checked() as checker:
            with torch.cuda.stream(side):
                x.add_(1.0)
            x.add_(1.0)
        self.assert_races(checker, "test_stream_order.py:", "stream 1 (first used at")


if __name__ == "__main__":
    unittest.main()
