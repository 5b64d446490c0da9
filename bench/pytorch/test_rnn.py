"""Unit tests of rnn.py's torch-free half (options, configurations, FLOP counts): `python3 -m unittest discover -s
bench/pytorch` (`npm test` runs them when python3 is installed, test/pytorch-reference.test.ts)."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rnn as R  # noqa: E402


class Options(unittest.TestCase):
    def test_defaults_are_the_issue_grid(self):
        a = R.parse_args(["bench"])
        self.assertEqual(a.cells, ["rnn-tanh", "lstm", "gru"])
        self.assertEqual(a.hidden, [512, 1152, 1792, 2304])
        self.assertEqual(a.batch, [1, 4, 16, 64])
        self.assertEqual(a.steps, 256)
        self.assertGreaterEqual(a.repeats, 20)
        configs = R.configurations(a)
        self.assertEqual(len(configs), 3 * 4 * 4 * 2)
        # the TF32 figure right after the fp32 one
        self.assertEqual(configs[:2], [("rnn-tanh", 512, 1, False), ("rnn-tanh", 512, 1, True)])

    def test_lists_and_choices(self):
        a = R.parse_args(["bench", "--cells", "gru,rnn-relu", "--hidden", "64", "--batch", "2,8", "--tf32", "off"])
        self.assertEqual(R.configurations(a), [(c, 64, b, False) for c in ["gru", "rnn-relu"] for b in [2, 8]])

    def test_bad_options_fail_in_one_line(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(R.main(["bench", "--repeats", "5"]), 1)
        self.assertEqual(err.getvalue(), "rnn.py: --repeats must be ≥ 20 (the median of at least 20 timings); got 5\n")
        for argv in (["bench", "--cells", "lstmx"], ["bench", "--hidden", "0"], ["golden"]):
            with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
                R.parse_args(argv)

    def test_recurrent_flops(self):
        self.assertEqual(R.recurrent_flops("lstm", 1152, 4, 256), 2 * 4 * 1152 * 1152 * 4 * 256)
        self.assertEqual(R.recurrent_flops("rnn-tanh", 512, 1, 1), 2 * 512 * 512)
        self.assertEqual(R.recurrent_flops("gru", 10, 2, 3), 2 * 3 * 100 * 2 * 3)


if __name__ == "__main__":
    unittest.main()
