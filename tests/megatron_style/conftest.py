"""pytest set-up for the Megatron-style optimizer tests in this folder.

With CUDA available nothing is installed: the tests import Megatron-Core as it is installed, or
from --megatron-tree, which is then put first on sys.path, and run on the GPU with Megatron's own
dependencies.

Without CUDA, the Megatron tree named by --megatron-tree (or the environment variable
SC_MEGATRON_TREE) is run on the host through the device layer of sim/megatron: CUDA tensors are
host tensors that report cuda:0 (devices.py), torch.distributed is a one-process gloo group,
and the optimizer path of megatron.core is loaded from the tree with placeholders for the rest
(loader.py). Transformer Engine's FusedAdam is the stand-in of te_stand_in.py, or absent with
--megatron-without-te.
There streams run in program order, and the fixture `stream_order_checked` (stream_order.py)
reports accesses that CUDA's stream order would leave unordered; with CUDA it skips, since the
streams are real there.
"""

import os
import sys
import warnings

import pytest
import torch

TREE_OPTION = "--megatron-tree"
TREE_VARIABLE = "SC_MEGATRON_TREE"
WITHOUT_TE_OPTION = "--megatron-without-te"
DEVICE_LAYER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            os.pardir, os.pardir, "sim", "megatron")
TREE_MARKER = os.path.join("megatron", "core", "optimizer", "distrib_optimizer.py")

_setup = {"tree": None, "device": None, "transformer_engine": None}


def pytest_addoption(parser):
    group = parser.getgroup("megatron", "Megatron-Core tree under test")
    group.addoption(TREE_OPTION, metavar="PATH", default=None,
                    help=f"a Megatron-LM tree (holds {TREE_MARKER}); defaults to "
                         f"${TREE_VARIABLE}. Required without CUDA.")
    group.addoption(WITHOUT_TE_OPTION, action="store_true", default=False,
                    help="without CUDA: leave Transformer Engine out (tests that need its "
                         "FusedAdam are skipped)")


def _tree(config, required):
    """The tree from the option or the environment variable, checked; None if neither is set
    and none is required."""
    tree = config.getoption(TREE_OPTION) or os.environ.get(TREE_VARIABLE)
    if not tree:
        if required:
            raise pytest.UsageError(
                f"no Megatron tree: pass {TREE_OPTION}=PATH or set {TREE_VARIABLE} "
                "(required without CUDA)")
        return None
    tree = os.path.abspath(tree)
    if not os.path.isfile(os.path.join(tree, TREE_MARKER)):
        raise pytest.UsageError(f"{tree} is not a Megatron-LM tree: it has no {TREE_MARKER}")
    return tree


def _install_host_device_layer(tree, transformer_engine):
    """Runs `tree`'s Megatron-Core on the host: the CUDA stand-in, torch.distributed, then the
    tree's optimizer modules through the loader."""
    sys.dont_write_bytecode = True  # the tree's modules leave no __pycache__ behind
    sys.path.insert(0, os.path.normpath(DEVICE_LAYER))
    import devices  # pylint: disable=import-outside-toplevel
    from loader import Megatron, TreeError  # pylint: disable=import-outside-toplevel

    devices.install_cuda_stand_in()
    devices.install_distributed()
    try:
        with warnings.catch_warnings():
            # The tree's modules warn at import that TE and Apex are missing: the loader hides
            # them while importing; the FusedAdam stand-in is bound afterwards.
            warnings.simplefilter("ignore", UserWarning)
            megatron = Megatron(tree)
        megatron.use_transformer_engine(transformer_engine)
    except TreeError as e:
        raise pytest.UsageError(f"cannot load the Megatron tree {tree}: {e}") from e
    return megatron


def pytest_configure(config):
    if torch.cuda.is_available():
        tree = _tree(config, required=False)
        if tree is not None:
            sys.path.insert(0, tree)
        _setup.update(tree=tree or "as installed", device="cuda", transformer_engine="as installed")
        return
    tree = _tree(config, required=True)
    transformer_engine = not config.getoption(WITHOUT_TE_OPTION)
    _install_host_device_layer(tree, transformer_engine)
    _setup.update(tree=tree, device="host-memory CUDA stand-in (no CUDA here)",
                  transformer_engine="FusedAdam stand-in" if transformer_engine else "absent")


@pytest.fixture
def stream_order_checked():
    """A context manager that records the ops within and yields a checker whose `races` lists
    the accesses CUDA would leave unordered; host stand-in only."""
    if _setup["device"] == "cuda":
        pytest.skip("CUDA runs the streams here: the race shows in the values")
    import stream_order  # pylint: disable=import-outside-toplevel
    return stream_order.checked


def pytest_report_header(config):
    return [f"megatron tree: {_setup['tree']}",
            f"megatron device: {_setup['device']}; transformer engine: "
            f"{_setup['transformer_engine']}"]
