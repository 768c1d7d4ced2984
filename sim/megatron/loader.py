"""Loads the optimizer path of Megatron-Core from a tree, unmodified, without `import megatron.core`.

Only the modules in REAL_MODULES execute. Their parent packages are registered empty (their
`__init__` never runs), Transformer Engine and Apex are hidden (ImportError, so Megatron takes its
torch.optim paths; a case with Transformer Engine runs optimizer.py's TE import block again with
the stand-in importable, TE_IMPORT_BLOCKS), and every other `megatron.*` module is a placeholder
whose names are classes that raise when called or instantiated: an unexpected path fails loudly
instead of running code the worker does not mean to run. From tensor_parallel/layers.py only the
attribute-copying helpers the shard builder calls are taken: copy_tensor_model_parallel_attributes
(and the table it reads) and, where the tree has it, copy_gtp_attributes. The dist_checkpointing
package runs from the tree whole, its `__init__` and its save and load (serialization.py,
strategies/) included: on PyTorch 2.11 every module of it imports on a CPU machine (what it imports
from outside it, such as main d98e8a64's models.hybrid in gpt_checkpoint_interop.py, is a
placeholder as anywhere else). Its torch_dist writer needs psutil when it saves.
Training mode loads Megatron's DistributedDataParallel on its first case
(Megatron.training_classes): its modules, MegatronModule (added to transformer/module.py's module
with the imports it names) and transformer/cuda_graphs.py's is_graph_capturing, loaded alone.
"""

import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import types
import warnings

import te_stand_in

DDP_MODULE = "megatron.core.distributed.distributed_data_parallel"
# Module name -> file under megatron/core; a name ending in a package's __init__.py is a package.
REAL_MODULES = {
    "megatron.core.config": "config.py",
    "megatron.core.package_info": "package_info.py",
    "megatron.core._rank_utils": "_rank_utils.py",
    "megatron.core._slurm_utils": "_slurm_utils.py",
    "megatron.core.utils": "utils.py",
    "megatron.core.enums": "enums.py",
    "megatron.core.config_logger": "config_logger.py",
    "megatron.core.fp8_utils": "fp8_utils.py",
    "megatron.core.fp4_utils": "fp4_utils.py",
    "megatron.core.optimizer_param_scheduler": "optimizer_param_scheduler.py",
    "megatron.core.optimizer": "optimizer/__init__.py",
    "megatron.core.optimizer.param_layout": "optimizer/param_layout.py",
    "megatron.core.optimizer.optimizer_config": "optimizer/optimizer_config.py",
    "megatron.core.optimizer.grad_scaler": "optimizer/grad_scaler.py",
    "megatron.core.optimizer.optimizer": "optimizer/optimizer.py",
    "megatron.core.optimizer.clip_grads": "optimizer/clip_grads.py",
    "megatron.core.optimizer.layer_wise_optimizer": "optimizer/layer_wise_optimizer.py",
    "megatron.core.optimizer.distrib_optimizer": "optimizer/distrib_optimizer.py",
    "megatron.core.optimizer.cpu_offloading": "optimizer/cpu_offloading/__init__.py",
    "megatron.core.optimizer.cpu_offloading.hybrid_optimizer":
        "optimizer/cpu_offloading/hybrid_optimizer.py",
    "megatron.core.optimizer.cpu_offloading.optimizer_state_offloader":
        "optimizer/cpu_offloading/optimizer_state_offloader.py",
    "megatron.core.distributed.distributed_data_parallel_config":
        "distributed/distributed_data_parallel_config.py",
    "megatron.core.distributed.param_and_grad_buffer": "distributed/param_and_grad_buffer.py",
    "megatron.core.process_groups_config": "process_groups_config.py",
    # Its getters are Megatron's own; the groups they return are the case's (parallel_groups).
    "megatron.core.parallel_state": "parallel_state.py",
    "megatron.core.msc_utils": "msc_utils.py",  # dist_checkpointing's storage switch
    # Training mode only (imported on the first case with "training": true): Megatron's own DDP.
    DDP_MODULE: "distributed/distributed_data_parallel.py",
    "megatron.core.distributed.data_parallel_base": "distributed/data_parallel_base.py",
    # Newer trees' DDP decorates its grad sync with trace_fn: a no-op here (no nemo-lens).
    "megatron.core.telemetry.fallbacks": "telemetry/fallbacks.py",
}
# Packages that run from the tree with every module in them (module name -> folder under core).
REAL_PACKAGES = {"megatron.core.dist_checkpointing": "dist_checkpointing"}
# Packages whose __init__ must not run: registered empty, their path pointing into the tree.
EMPTY_PACKAGES = {"megatron": "", "megatron.core": "core", "megatron.core.distributed":
                  "core/distributed"}
# Not installed as far as Megatron may tell: the configuration without Transformer Engine or Apex.
# Megatron's own TE wrappers import TE first, so without TE they raise ImportError too.
HIDDEN = ("transformer_engine", "transformer_engine_torch", "apex",
          "megatron.core.extensions.transformer_engine")
TENSOR_PARALLEL = "megatron.core.tensor_parallel"
TP_FUNCTION = "copy_tensor_model_parallel_attributes"
TP_TABLE = "_MODEL_PARALLEL_ATTRIBUTE_DEFAULTS"
# Newer trees also copy GTP metadata onto the shards, with a helper of the same kind.
TP_OPTIONAL_FUNCTIONS = ("copy_gtp_attributes", "param_is_not_gtp_duplicate")
# The grad norm and zero count filter out tensor-parallel duplicates (tensor_parallel/layers.py)
# and parameters marked `shared` (transformer/module.py): those two functions are loaded alone.
TP_DUPLICATE_FUNCTION = "param_is_not_tensor_parallel_duplicate"
TRANSFORMER_MODULE = "megatron.core.transformer.module"
SHARED_FUNCTION = "param_is_not_shared"
# Training mode: DDP's base class derives from MegatronModule (added to transformer/module.py's
# module, with the imports it names, when training mode first loads), and its grad hook asks
# transformer/cuda_graphs.py's is_graph_capturing (loaded alone, with the flag it reads).
MODULE_CLASS = "MegatronModule"
CUDA_GRAPHS = "megatron.core.transformer.cuda_graphs"
GRAPH_NAMES = ("is_graph_capturing", "_IS_GRAPH_CAPTURING")


def _rank_zero():
    """parallel_state's tensor-parallel and GTP rank getters in the worker's worlds (tensor-
    parallel size 1, no GTP)."""
    return 0


# What the duplicate filters of layers.py call from parallel_state.
PARALLEL_STATE_RANKS = ("get_tensor_model_parallel_rank", "get_gtp_weight_remat_rank",
                        "get_expert_gtp_weight_remat_rank")


# What a case with Transformer Engine may import of it: the stand-in package (te_stand_in.py).
TE_MODULES = ("transformer_engine", "transformer_engine.pytorch",
              "transformer_engine.pytorch.optimizers")

STAND_INS = [
    "Transformer Engine and Apex: hidden (ImportError) while the tree loads, so its modules take "
    "their torch paths at import (multi-tensor copies and norms: Megatron's local_multi_tensor_* "
    "fallbacks; fp8_utils without TE); in cases with transformer_engine the import block of "
    "optimizer/optimizer.py runs again with TE importable and binds the stand-in's "
    "multi_tensor_applier and multi_tensor_scale (te_stand_in.py); clip_grads.py keeps the "
    "fallbacks (the stand-in serves no multi_tensor_l2norm); megatron.* modules outside the "
    "optimizer path are placeholders that raise when used",
    "Transformer Engine's FusedAdam: in cases with transformer_engine (the hybrid optimizer's "
    "accelerator side, the precision-aware optimizer) a stand-in written from TE's FusedAdam and "
    "its AdamW kernels (sim/megatron/te_stand_in.py, version " + te_stand_in.VERSION + "), "
    "installed where the optimizer modules bound TE's class at import",
    "parallel_state's initialize_model_parallel, for buffers built without a pg_collection: "
    "Megatron's own parallel_state module, its data-parallel (with and without context "
    "parallelism) and tensor-parallel groups set to the case's groups for the build "
    "(parallel_groups), as initialize_model_parallel sets them; its getters are the tree's",
    "parallel_state's get_tensor_model_parallel_rank (and, on newer trees, the GTP rank getters), "
    "which the grad norm's duplicate filters call: 0 (the worker's worlds have tensor-parallel "
    "size 1 and no GTP)",
]


class TreeError(Exception):
    """The tree cannot be served: kind is "not_a_tree", "api_moved" or "import_failed"."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


class PlaceholderCalled(RuntimeError):
    """Megatron reached a module the worker does not load."""


class _Placeholder(type):
    """Classes standing for names of modules the worker does not load."""

    def __call__(cls, *args, **kwargs):
        raise PlaceholderCalled(f"{cls.__qualname__} is not loaded by the worker "
                                "(a placeholder for a module outside the optimizer path)")

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}", cls.__module__)

    def __getitem__(cls, item):
        return cls


def placeholder(qualname, module):
    return _Placeholder(qualname.rsplit(".", 1)[-1], (),
                        {"__qualname__": qualname, "__module__": module})


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = placeholder(f"{self.__name__}.{name}", self.__name__)
        setattr(self, name, value)
        return value


class _BuiltLoader(importlib.abc.Loader):
    """Loads a module made by `make(module)` instead of by executing a file."""

    def __init__(self, make):
        self.make = make

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        self.make(module)


class _TreeFinder(importlib.abc.MetaPathFinder):
    def __init__(self, core):
        self.core = core  # TREE/megatron/core
        self.transformer_engine = False  # whether TE_MODULES import the stand-in

    def find_spec(self, fullname, path=None, target=None):
        if self.transformer_engine and fullname in TE_MODULES:
            spec = importlib.machinery.ModuleSpec(fullname, _BuiltLoader(_make_te_module),
                                                  is_package=fullname != TE_MODULES[-1])
            return spec
        if any(fullname == h or fullname.startswith(h + ".") for h in HIDDEN):
            raise ModuleNotFoundError(f"No module named '{fullname}' (hidden from the worker)",
                                      name=fullname)
        if fullname != "megatron" and not fullname.startswith("megatron."):
            return None
        if fullname in EMPTY_PACKAGES:
            return self._empty_package(fullname)
        if fullname in REAL_MODULES:
            return self._real(fullname)
        package = next((p for p in REAL_PACKAGES if fullname.startswith(p + ".")
                        or fullname == p), None)
        if package is not None:
            return self._in_real_package(fullname, package)
        if fullname == TENSOR_PARALLEL:
            return importlib.machinery.ModuleSpec(fullname, _BuiltLoader(self._tensor_parallel))
        if fullname == TRANSFORMER_MODULE:
            return importlib.machinery.ModuleSpec(fullname,
                                                  _BuiltLoader(self._transformer_module))
        if fullname == CUDA_GRAPHS:
            return importlib.machinery.ModuleSpec(fullname, _BuiltLoader(
                lambda m: self._load_alone(m, "transformer/cuda_graphs.py", GRAPH_NAMES)))
        return importlib.machinery.ModuleSpec(fullname, _BuiltLoader(_make_placeholder))

    def _empty_package(self, fullname):
        where = os.path.join(os.path.dirname(self.core), EMPTY_PACKAGES[fullname])
        spec = importlib.machinery.ModuleSpec(fullname, _BuiltLoader(lambda m: None),
                                              is_package=True)
        spec.submodule_search_locations = [os.path.normpath(where)]
        return spec

    def _real(self, fullname, relative=None):
        relative = relative or REAL_MODULES[fullname]
        file = os.path.join(self.core, relative)
        if not os.path.isfile(file):
            raise TreeError("api_moved", f"the tree has no megatron/core/{relative}")
        package = [os.path.dirname(file)] if file.endswith("__init__.py") else None
        return importlib.util.spec_from_file_location(fullname, file,
                                                      submodule_search_locations=package)

    def _in_real_package(self, fullname, package):
        """A module of one of REAL_PACKAGES, from its file; None (not found) for a name the
        tree's package does not have, as for an installed package."""
        parts = fullname[len(package):].lstrip(".").split(".")
        folder = os.path.join(REAL_PACKAGES[package], *[p for p in parts if p])
        for relative in (os.path.join(folder, "__init__.py"), folder + ".py"):
            if os.path.isfile(os.path.join(self.core, relative)):
                return self._real(fullname, relative)
        if fullname == package:
            raise TreeError("api_moved", f"the tree has no megatron/core/{folder}/__init__.py")
        return None

    def _load_alone(self, module, relative, required, optional=(), given=None, imports=False):
        """Makes `module` a placeholder holding the top-level names `required` (and those of
        `optional` that exist) of megatron/core/`relative`, run alone with `given` beside them
        (and, with `imports`, the file's top-level imports of names they use); returns the names
        it set."""
        _make_placeholder(module)
        file = os.path.join(self.core, relative)
        if not os.path.isfile(file):
            raise TreeError("api_moved", f"the tree has no megatron/core/{relative}")
        with open(file) as f:
            tree = ast.parse(f.read(), filename=file)
        defined = set().union(*(_defines(node) for node in tree.body))
        for name in required:
            if name not in defined:
                raise TreeError("api_moved", f"{relative} has no '{name}'")
        wanted = set(required) | (defined & set(optional))
        namespace = _execute(tree, file, wanted, module.__name__, given or {}, imports)
        for name in wanted:
            setattr(module, name, namespace[name])

    def _tensor_parallel(self, module):
        self._load_alone(module, "tensor_parallel/layers.py", (TP_FUNCTION, TP_TABLE),
                         TP_OPTIONAL_FUNCTIONS + (TP_DUPLICATE_FUNCTION,),
                         {name: _rank_zero for name in PARALLEL_STATE_RANKS})

    def _transformer_module(self, module):
        self._load_alone(module, "transformer/module.py", (SHARED_FUNCTION,))

    def add_megatron_module(self):
        """Training mode: MegatronModule, with the imports it names (real modules or
        placeholders, as anywhere), added to the module of transformer/module.py."""
        module = importlib.import_module(TRANSFORMER_MODULE)
        if not isinstance(getattr(module, MODULE_CLASS), _Placeholder):
            return
        self._load_alone(module, "transformer/module.py", (MODULE_CLASS,), imports=True)


def _make_te_module(module):
    """One of TE_MODULES, holding what Megatron's optimizer path imports from it."""
    if module.__name__ == "transformer_engine":
        module.__version__ = te_stand_in.VERSION
    if module.__name__ == TE_MODULES[-1]:
        module.FusedAdam = te_stand_in.FusedAdam
        module.multi_tensor_applier = te_stand_in.multi_tensor_applier
        module.multi_tensor_scale = te_stand_in.multi_tensor_scale
        module.FusedSGD = placeholder("transformer_engine.pytorch.optimizers.FusedSGD",
                                      module.__name__)


def _make_placeholder(module):
    module.__class__ = _PlaceholderModule
    module.__path__ = []


def _execute(tree, file, names, module_name, given, imports=False):
    """Runs only the top-level definitions and assignments of `names` from a parsed file, with
    the names in `given` defined beside them; with `imports`, also the top-level import
    statements that bind a name those definitions use."""
    body = [node for node in tree.body if _defines(node) & names]
    if imports:
        used = {n.id for node in body for n in ast.walk(node) if isinstance(n, ast.Name)}
        body = [node for node in tree.body if node in body or _imports(node) & used]
    namespace = {"__name__": module_name, "__file__": file,
                 "__package__": module_name.rpartition(".")[0], **given}
    exec(compile(ast.Module(body=body, type_ignores=[]), file, "exec"), namespace)
    return namespace


def _imports(node):
    """The names a top-level import statement binds (none for any other statement)."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return set()
    return {alias.asname or alias.name.split(".")[0] for alias in node.names}


def _defines(node):
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


class Megatron:
    """The Megatron-Core names the worker drives, loaded from one tree."""

    def __init__(self, tree):
        self.tree = tree
        self.core = os.path.join(tree, "megatron", "core")
        if not os.path.isfile(os.path.join(self.core, REAL_MODULES[
                "megatron.core.optimizer.distrib_optimizer"])):
            raise TreeError("not_a_tree",
                            f"{tree} has no megatron/core/optimizer/distrib_optimizer.py")
        self.finder = _TreeFinder(self.core)
        sys.meta_path.insert(0, self.finder)
        os.environ.setdefault("NO_VCS_VERSION", "1")  # package_info would run git otherwise
        self._import()
        check_api(self)
        self.transformer_engine = False
        self._training = None  # (DistributedDataParallel, ProcessGroupCollection), once loaded
        self.without_te = {(owner, name): getattr(getattr(self, owner), name, None)
                           for owner, name in WITH_TE}
        self.te_blocks = []  # (module, code, names) of TE_IMPORT_BLOCKS
        for name, relative in TE_IMPORT_BLOCKS.items():
            block = _te_import_block(os.path.join(self.core, relative))
            if block is not None:
                self.te_blocks.append((sys.modules[name], *block))

    def use_transformer_engine(self, on):
        """Makes the optimizer path see Transformer Engine (the FusedAdam stand-in) or not: the
        names its modules bound at import as they bind them with TE installed, the TE modules
        importable (OptimizerConfig and get_te_version import them when called), the import
        blocks of TE_IMPORT_BLOCKS run again, and get_te_version's cache cleared."""
        if on == self.transformer_engine:
            return
        for (owner, name), value in WITH_TE.items():
            module = getattr(self, owner)
            if not hasattr(module, name):
                raise TreeError("api_moved", f"{module.__name__} has no '{name}' (the name it "
                                "binds TE's class or flag to)")
            setattr(module, name, value if on else self.without_te[(owner, name)])
        self.finder.transformer_engine = on
        for name in TE_MODULES:
            sys.modules.pop(name, None)
        self.utils._te_version = None
        for module, code, names in self.te_blocks:
            for name in names:
                module.__dict__.pop(name, None)
            with warnings.catch_warnings():  # the fallback's "TE and Apex are not installed"
                warnings.simplefilter("ignore")
                exec(code, module.__dict__)
        self.transformer_engine = on

    def training_classes(self):
        """Training mode's DistributedDataParallel and ProcessGroupCollection, Megatron's own,
        loaded on the first case that asks for them; TreeError when the tree cannot serve
        them."""
        if self._training is None:
            try:
                self.finder.add_megatron_module()
                ddp = importlib.import_module(DDP_MODULE)
                groups = importlib.import_module("megatron.core.process_groups_config")
            except TreeError:
                raise
            except Exception as e:
                raise TreeError("import_failed", f"{type(e).__name__}: {e}") from e
            self._training = check_training_api(ddp, groups)
        return self._training

    def _import(self):
        try:
            # Before utils, as megatron/core/__init__ has it (through tensor_parallel): newer
            # trees' utils imports parallel_state, which imports from utils.
            self.parallel_state = importlib.import_module("megatron.core.parallel_state")
            optimizer = importlib.import_module("megatron.core.optimizer")
            self.distrib = importlib.import_module("megatron.core.optimizer.distrib_optimizer")
            self.hybrid = importlib.import_module(
                "megatron.core.optimizer.cpu_offloading.hybrid_optimizer")
            config = importlib.import_module("megatron.core.optimizer.optimizer_config")
            ddp_config = importlib.import_module(
                "megatron.core.distributed.distributed_data_parallel_config")
            self.buffer = importlib.import_module("megatron.core.distributed.param_and_grad_buffer")
            importlib.import_module("megatron.core.optimizer_param_scheduler")
            self.tensor_parallel = importlib.import_module(TENSOR_PARALLEL)
            self.utils = importlib.import_module("megatron.core.utils")
            self.clip_grads = importlib.import_module("megatron.core.optimizer.clip_grads")
        except TreeError:
            raise
        except Exception as e:  # any failure to import the tree's code
            raise TreeError("import_failed", f"{type(e).__name__}: {e}") from e
        self.factory_module = optimizer
        self.OptimizerConfig = getattr(config, "OptimizerConfig", None)
        self.DistributedDataParallelConfig = getattr(ddp_config, "DistributedDataParallelConfig",
                                                     None)


# The modules whose import block binds Transformer Engine's multi-tensor kernels (`try: from
# transformer_engine.pytorch.optimizers import ...`): a case that turns TE on or off runs the
# tree's own block again, with the names it binds in any branch dropped first, so that they are
# what that import binds with TE installed or without it (module name -> file under core).
TE_IMPORT_BLOCKS = {"megatron.core.optimizer.optimizer": "optimizer/optimizer.py"}


def _te_import_block(file):
    """The first top-level try statement of `file` that imports from Transformer Engine,
    compiled, and every name it binds in any branch; None where the file has none."""
    with open(file) as f:
        tree = ast.parse(f.read(), filename=file)
    for node in tree.body:
        first = node.body[0] if isinstance(node, ast.Try) and node.body else None
        if isinstance(first, ast.ImportFrom) and (first.module or "").startswith(
                "transformer_engine"):
            names = set()
            for inner in ast.walk(node):
                names |= _imports(inner) | _defines(inner)
            return compile(ast.Module(body=[node], type_ignores=[]), file, "exec"), names
    return None


# The globals of parallel_state.py that initialize_model_parallel sets and the getters of the
# data-parallel (with context parallelism, and without: no context parallelism here) and
# tensor-parallel groups read.
PARALLEL_STATE_GROUPS = ("_DATA_PARALLEL_GROUP_WITH_CP", "_DATA_PARALLEL_GROUP",
                         "_TENSOR_MODEL_PARALLEL_GROUP")


@contextlib.contextmanager
def parallel_groups(megatron, data_parallel, tensor_parallel):
    """parallel_state initialized with these groups (as initialize_model_parallel would leave
    it, for these two kinds of group) while the block runs, and uninitialized again after."""
    module = megatron.parallel_state
    for name in PARALLEL_STATE_GROUPS:
        if not hasattr(module, name):
            raise TreeError("api_moved", f"parallel_state has no '{name}'")
    values = (data_parallel, data_parallel, tensor_parallel)
    for name, value in zip(PARALLEL_STATE_GROUPS, values):
        setattr(module, name, value)
    try:
        yield
    finally:
        for name in PARALLEL_STATE_GROUPS:
            setattr(module, name, None)


# The names the optimizer modules bind, at import, to TE's FusedAdam or to flags saying TE is
# there (the `try: from transformer_engine... import FusedAdam` branches), with their values when
# it is: (owner attribute, name) -> value.
WITH_TE = {
    ("factory_module", "Adam"): te_stand_in.FusedAdam,
    ("factory_module", "USING_PYTORCH_OPTIMIZER"): False,
    ("distrib", "Adam"): te_stand_in.FusedAdam,
    ("distrib", "USING_TE_OPTIMIZER"): True,
    ("distrib", "HAVE_APEX_OR_TE"): True,
}


# What the worker calls, with the arguments it passes: (owner attribute, name, arguments).
REQUIRED = [
    ("factory_module", "_get_megatron_optimizer_based_on_param_groups",
     ["config", "model_chunks", "param_groups", "per_model_buffers", "data_parallel_group",
      "data_parallel_group_gloo", "data_parallel_group_idx", "intra_dist_opt_group",
      "distributed_optimizer_instance_id", "pg_collection"]),
    ("distrib", "DistributedOptimizer", None),
    ("factory_module", "ConstantGradScaler", None),
    ("factory_module", "DynamicGradScaler",
     ["initial_scale", "min_scale", "growth_factor", "backoff_factor", "growth_interval",
      "hysteresis"]),
    ("hybrid", "HybridDeviceOptimizer", None),
    ("buffer", "_ParamAndGradBuffer", None),
    ("buffer", "group_params_for_buffers", ["params", "grad_reduce_in_fp32"]),
    ("buffer", "partition_buckets", ["buffers", "force_single_bucket_group"]),
    ("buffer", "shard_buffer", ["buffer", "data_parallel_world_size"]),
    ("clip_grads", "get_grad_norm_fp32",
     ["grads_for_norm", "norm_type", "grad_stats_parallel_group"]),
]
DIST_OPT_METHODS = {
    "__init__": ["optimizer", "config", "grad_scaler", "init_state_fn", "model_chunks",
                 "per_model_buffers", "data_parallel_group", "data_parallel_group_gloo",
                 "data_parallel_group_idx", "distributed_optimizer_instance_id"],
    "_build_model_and_main_param_groups": ["gbuf_ranges", "param_gbuf_map", "opt_group_ranges",
                                           "config"],
    "_build_optimizer_group_ranges": ["param_groups", "gbuf_ranges"],
    "compute_full_param_layout": ["params", "bucket_size", "data_parallel_world_size",
                                 "ddp_config", "expert_data_parallel_world_size"],
    "_get_model_param_range_map": ["param"],
    "step": [], "zero_grad": ["set_to_none"], "reload_model_params": [],
}
BUFFER_ARGUMENTS = ["ddp_config", "param_dtype", "grad_dtype", "params_with_names",
                    "data_parallel_group", "bucket_size", "param_to_name",
                    "gradient_scaling_factor", "param_indices", "nccl_ub", "pg_collection",
                    "param_layout"]
CONFIG_FIELDS = ["optimizer", "lr", "bf16", "fp16", "clip_grad", "decoupled_weight_decay",
                 "use_distributed_optimizer", "optimizer_cpu_offload",
                 "optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d",
                 "use_precision_aware_optimizer", "store_param_remainders"]
DDP_FIELDS = ["grad_reduce_in_fp32", "overlap_grad_reduce", "use_distributed_optimizer",
              "bucket_size", "pad_buckets_for_high_nccl_busbw", "nccl_ub"]


def check_api(megatron):
    """Raises TreeError("api_moved") naming the first thing the worker needs that the tree lacks;
    binds each function and class of REQUIRED to `megatron` under its own name."""
    for owner, name, arguments in REQUIRED:
        value = getattr(getattr(megatron, owner), name, None)
        if value is None:
            raise TreeError("api_moved", f"{getattr(megatron, owner).__name__} has no '{name}'")
        setattr(megatron, name, value)
        if arguments is not None:
            _check_arguments(value, name, arguments)
    for name, arguments in DIST_OPT_METHODS.items():
        _check_method(megatron.DistributedOptimizer, name, arguments)
    _check_method(megatron._ParamAndGradBuffer, "__init__", BUFFER_ARGUMENTS)
    _check_fields(megatron.OptimizerConfig, "OptimizerConfig", CONFIG_FIELDS)
    _check_fields(megatron.DistributedDataParallelConfig, "DistributedDataParallelConfig",
                  DDP_FIELDS)


DDP_ARGUMENTS = ["config", "ddp_config", "module", "disable_bucketing", "pg_collection",
                 "full_param_layout"]
DDP_METHODS = ["no_sync", "zero_grad_buffer", "start_param_sync", "_start_bucket_group_param_sync"]


def check_training_api(ddp_module, groups_module):
    """(DistributedDataParallel, ProcessGroupCollection) of the tree, or TreeError("api_moved")
    naming what training mode needs that the tree lacks."""
    ddp = getattr(ddp_module, "DistributedDataParallel", None)
    collection = getattr(groups_module, "ProcessGroupCollection", None)
    for value, name in ((ddp, "DistributedDataParallel"), (collection, "ProcessGroupCollection")):
        if value is None or isinstance(value, _Placeholder):
            raise TreeError("api_moved", f"the tree has no {name}")
    _check_method(ddp, "__init__", DDP_ARGUMENTS)
    for name in DDP_METHODS:
        _check_method(ddp, name, [])
    return ddp, collection


def _check_method(cls, name, arguments):
    method = getattr(cls, name, None)
    if method is None:
        raise TreeError("api_moved", f"{cls.__name__} has no '{name}'")
    _check_arguments(method, f"{cls.__name__}.{name}", arguments)


def _check_arguments(function, name, arguments):
    parameters = inspect.signature(function).parameters
    for argument in arguments:
        if argument not in parameters:
            raise TreeError("api_moved", f"{name} has no argument '{argument}'")


def _check_fields(cls, name, fields):
    if cls is None:
        raise TreeError("api_moved", f"the tree has no {name}")
    known = getattr(cls, "__dataclass_fields__", {})
    for field in fields:
        if field not in known:
            raise TreeError("api_moved", f"{name} has no field '{field}'")
