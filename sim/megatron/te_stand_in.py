"""A stand-in for Transformer Engine's FusedAdam and its multi-tensor scale, for cases that run
with Transformer Engine on a machine that has none (TE needs CUDA and its own build).

It is written from TE's FusedAdam (transformer_engine/pytorch/optimizers/fused_adam.py), the
multi-tensor launch that checks its tensor lists (multi_tensor_apply.cuh) and its AdamW-mode
kernels (multi_tensor_adam.cu: AdamFunctor, AdamFunctorMaster, AdamFunctorMasterParamRemainder).

Contract. For each point: what TE refuses or computes, then what the stand-in does.

Construction (FusedAdam.__init__)
- amsgrad=True: TE raises RuntimeError. Same.
- master_weight_dtype other than fp32 or fp16 while master_weights is set; exp_avg_dtype or
  exp_avg_sq_dtype other than fp32, fp16, bf16 or uint8 (fp8): TE raises RuntimeError. Same.
  Without master_weights TE ignores master_weight_dtype; so does the stand-in.
- The dtypes TE accepts but keeps scaled (fp16 master; fp16, bf16, fp8 moments): TE computes in
  fp32 copies and scales back after the step. Refused by name (StandInRefused).
- capturable (CUDA-graph mode, step and lr as device tensors) and adam_w_mode=False (L2 mode):
  TE computes them. Refused by name.
- TE allocates its overflow flag on the CUDA device, so it cannot be built without one. Same:
  the flag is a CUDA tensor (the worker's AcceleratorTensor; on a machine with no CUDA stand-in
  installed, torch refuses it as it refuses TE).
- store_param_remainders takes effect only with fp32 master weights. Same.

One step (FusedAdam.step), per parameter group
- The group's step count goes up by one (a Python int); every parameter without state gets it
  first (exp_avg and exp_avg_sq zeroed, the master a copy of the parameter, or zero remainders
  for a bf16 parameter when remainders are stored), whether or not it has a gradient. Same.
- The gradient is `.grad`, or `.decoupled_grad` with use_decoupled_grad; a parameter without
  one is skipped. Same. A sparse gradient: TE raises RuntimeError. Same.
- A parameter dtype other than fp32, fp16, bf16 (fp8 tensors aside): TE raises RuntimeError.
  Same. fp8 (Float8Tensor) parameters: TE computes them; none can exist here (TE is hidden).
- fp16 and bf16 parameters in one group: TE raises RuntimeError. Same.
- TE makes at most two launches: the 16-bit parameters (with their masters when master_weights
  is set, through the remainder kernel when remainders are stored and every one is bf16), then
  the fp32 parameters (without masters). Same, in that order.

One launch (the multi-tensor apply and the kernel's host code); `check_launch` below
- Four lists (grads, params, exp_avg, exp_avg_sq) or five (and masters; exactly five for the
  remainder kernel), each holding as many tensors as the first, and the first not empty: TE
  raises otherwise. Same.
- Every tensor on CUDA, on the first tensor's device, contiguous (channels-last counts), with
  as many elements as its parameter: TE raises otherwise. Same: a host tensor is refused, as
  TE refuses CPU tensors.
- One grad dtype and one param dtype per launch, each fp32, fp16 or bf16 (bf16 only, for the
  remainder kernel); moments both fp32 or both bf16; masters fp32, remainders int16: TE 2.x's
  common kernels raise otherwise (older builds dispatched on the first tensor's dtype alone and
  read the others through it). The stand-in raises; bf16 moments are refused by name (the Python
  layer above never hands them to the kernel).
- What a launch computes, per element, in fp32: m = b1*m + (1-b1)*g;
  v = b2*v + (1-b2)*g*g; p -= lr * ((m/bc1) / (sqrt(v/bc2) + eps) + decay*p), with p the master
  (or the master joined from a bf16 parameter and its remainder) where there is one; then the
  master, the parameter (rounded to its dtype) and the moments are stored. bc1, bc2 are
  `1 - pow(beta, step)` from the fp32 betas, computed in double and rounded to fp32 (1 without
  bias correction). The stand-in computes the same values, one fp32 rounding per operation in the
  kernel's order (`adamw_kernel`); the kernel's sqrtf is correctly rounded, and so is the
  stand-in's.
- What the stand-in does not share: the launch is synchronous on the host (no stream), the
  overflow flag is neither read nor written (TE's non-capturable kernels ignore it too), and
  a launch is not split into chunks of tensors and blocks (the split changes no value).

States, state_dict, zero_grad
- get_unscaled_state / set_scaled_state, state_dict and load_state_dict: as TE for fp32 states
  and int16 remainders (the only ones the stand-in keeps); a state name outside exp_avg,
  exp_avg_sq, master_param raises KeyError, as TE's dtype map does. Same.
- zero_grad: TE's defaults (set to None), decoupled grads and the deprecated set_grad_none; a
  set_to_none that contradicts set_grad_none raises ValueError in TE. Same.
"""

import numpy as np
import torch

VERSION = "2.1.0+shardcheck.stand.in"  # satisfies Megatron's is_te_min_version("2.1.0") checks


class StandInRefused(RuntimeError):
    """What the stand-in does not implement; real TE would."""


def _f32(x):
    return float(np.float32(x))


TE_STATE_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.uint8)


def _refuse_state_dtypes(master_weights, master_dtype, exp_avg_dtype, exp_avg_sq_dtype):
    """TE's constructor refuses state dtypes it has no kernel path for; the stand-in keeps fp32
    states only, so it refuses by name the scaled ones TE would keep."""
    if master_weights and master_dtype not in (torch.float32, torch.float16):
        raise RuntimeError(f"FusedAdam keeps fp32 or fp16 master weights, not {master_dtype}")
    for name, dtype in (("exp_avg", exp_avg_dtype), ("exp_avg_sq", exp_avg_sq_dtype)):
        if dtype not in TE_STATE_DTYPES:
            raise RuntimeError(f"FusedAdam keeps {name} in fp32, fp16, bf16 or fp8, not {dtype}")
    wanted = [exp_avg_dtype, exp_avg_sq_dtype] + ([master_dtype] if master_weights else [])
    if any(dtype != torch.float32 for dtype in wanted):
        raise StandInRefused("the FusedAdam stand-in does not implement non-fp32 states")


def bias_corrections(beta1, beta2, step):
    """TE's host code: float betas, `1 - std::pow(beta, step)` (double), assigned to float."""
    b1, b2 = _f32(beta1), _f32(beta2)
    return _f32(1.0 - b1 ** step), _f32(1.0 - b2 ** step)


def _correctly_rounded_sqrt(t):
    """The kernel's `sqrtf`, correctly rounded as CUDA's is: torch 2.11's vectorised CPU sqrt is
    not (it is 1 ulp off for about one root in six), numpy's float32 sqrt is."""
    root = np.sqrt(t.detach().to("cpu").numpy())
    return t.clone().copy_(torch.from_numpy(root))


def adamw_kernel(p, g, m, v, lr, beta1, beta2, eps, decay, bc1, bc2):
    """One AdamW-mode kernel pass over fp32 tensors: p, m, v in place; g is read.

    Each line is one fp32 operation of the kernel, so that every intermediate rounds as there.
    Divisions are by full tensors: CUDA's tensor-by-scalar division multiplies by the reciprocal,
    the kernel divides."""
    b1, b2 = _f32(beta1), _f32(beta2)
    one_minus_b1 = _f32(np.float32(1) - np.float32(b1))
    one_minus_b2 = _f32(np.float32(1) - np.float32(b2))
    m.copy_(torch.mul(m, b1).add_(torch.mul(g, one_minus_b1)))
    v.copy_(torch.mul(v, b2).add_(torch.mul(g, one_minus_b2).mul_(g)))
    m_hat = torch.div(m, torch.full_like(m, bc1))
    v_hat = torch.div(v, torch.full_like(v, bc2))
    denom = _correctly_rounded_sqrt(v_hat).add_(_f32(eps))
    update = torch.div(m_hat, denom).add_(torch.mul(p, _f32(decay)))
    p.sub_(torch.mul(update, _f32(lr)))


def join_remainder(param_bf16, remainder):
    """The fp32 master a bf16 parameter and its int16 remainder stand for (the kernel's union:
    high half the bf16 bits, less one where the remainder is negative; low half the remainder)."""
    high = param_bf16.view(torch.int16).to(torch.int32) - (remainder < 0).to(torch.int32)
    bits = (high << 16) | (remainder.to(torch.int32) & 0xFFFF)
    return bits.view(torch.float32)


def split_remainder(master, param_bf16, remainder):
    """Writes the bf16 parameter (the high half, rounded up where the low half is negative as an
    int16) and the int16 remainder of an fp32 master."""
    bits = master.view(torch.int32)
    low = (bits & 0xFFFF).to(torch.int16)  # wraps to the int16 the kernel stores
    high = ((bits >> 16) + (low < 0).to(torch.int32)).to(torch.int16)
    param_bf16.view(torch.int16).copy_(high)
    remainder.copy_(low)


class FusedAdam(torch.optim.Optimizer):
    """TE's FusedAdam, as far as Megatron-Core uses it (see the module's text)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, bias_correction=True, adam_w_mode=True, capturable=False,
                 master_weights=False, master_weight_dtype=torch.float32,
                 exp_avg_dtype=torch.float32, exp_avg_sq_dtype=torch.float32,
                 use_decoupled_grad=False, store_param_remainders=False, set_grad_none=None):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        _refuse_state_dtypes(master_weights, master_weight_dtype, exp_avg_dtype,
                             exp_avg_sq_dtype)
        refused = {"capturable": capturable, "adam_w_mode=False": not adam_w_mode}
        for what, asked in refused.items():
            if asked:
                raise StandInRefused(f"the FusedAdam stand-in does not implement {what}")
        super().__init__(params, {"lr": lr, "bias_correction": bias_correction, "betas": betas,
                                  "eps": eps, "weight_decay": weight_decay})
        self.adam_w_mode = 1
        self.capturable = False
        self.master_weights = master_weights
        self.master_weight_dtype = master_weight_dtype
        self.exp_avg_dtype, self.exp_avg_sq_dtype = exp_avg_dtype, exp_avg_sq_dtype
        self.use_decoupled_grad = use_decoupled_grad
        self.store_param_remainders = (store_param_remainders and master_weights
                                       and master_weight_dtype == torch.float32)
        self.set_grad_none = set_grad_none
        self._dummy_overflow_buf = torch.tensor([0], dtype=torch.int, device="cuda")

    # ---- gradients ----

    def zero_grad(self, set_to_none=None):
        if self.set_grad_none is not None:
            if set_to_none is not None and set_to_none != self.set_grad_none:
                raise ValueError(f"zero_grad(set_to_none={set_to_none}) contradicts FusedAdam's "
                                 f"set_grad_none={self.set_grad_none}")
            set_to_none = self.set_grad_none
        if set_to_none is None:
            set_to_none = True
        if not self.use_decoupled_grad and not set_to_none:
            super().zero_grad(set_to_none=False)
            return
        for group in self.param_groups:
            for p in group["params"]:
                if self.use_decoupled_grad and set_to_none:
                    p.decoupled_grad = None
                elif self.use_decoupled_grad:
                    p.decoupled_grad.zero_()
                else:
                    p.grad = None

    def _grad_of(self, p):
        if self.use_decoupled_grad:
            return getattr(p, "decoupled_grad", None)
        return p.grad

    # ---- states (fp32 only) ----

    def _keeps_remainder(self, param, state_name):
        return (self.store_param_remainders and state_name == "master_param"
                and param.dtype == torch.bfloat16)

    # The states TE keeps, all fp32 here; TE looks a name up in this map before anything else,
    # so any other entry of a param's state (a non-tensor flag, say) raises KeyError there.
    STATE_NAMES = ("exp_avg", "exp_avg_sq", "master_param")

    def get_unscaled_state(self, param, state_name):
        if state_name not in self.STATE_NAMES:
            raise KeyError(state_name)
        state = self.state[param][state_name]
        expected = torch.int16 if self._keeps_remainder(param, state_name) else torch.float32
        assert state.dtype == expected
        return state

    def set_scaled_state(self, param, state_name, unscaled_state):
        remainder = self._keeps_remainder(param, state_name)
        assert unscaled_state.dtype == (torch.int16 if remainder else torch.float32)
        if state_name not in self.state[param]:
            self._initialize_state(param, state_name, False, remainder)
        self.state[param][state_name].copy_(unscaled_state)

    def _initialize_state(self, param, state_name, zero_buffer, store_param_remainders=False):
        if store_param_remainders:
            data = torch.zeros_like(param, dtype=torch.int16)
        else:
            data = torch.empty_like(param, dtype=torch.float32)
        if zero_buffer:
            data.zero_()
        self.state[param][state_name] = data

    def initialize_state(self, param, store_param_remainders):
        self._initialize_state(param, "exp_avg", zero_buffer=True)
        self._initialize_state(param, "exp_avg_sq", zero_buffer=True)
        if self.master_weights:
            self._initialize_state(param, "master_param", zero_buffer=False,
                                   store_param_remainders=store_param_remainders)
            if not store_param_remainders:
                self.set_scaled_state(param, "master_param", param.clone().detach().float())

    def state_dict(self):
        saved = super().state_dict()
        ids = [i for g in saved["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        by_id = dict(zip(ids, params))
        for k, v in saved["state"].items():
            if k in by_id:
                saved["state"][k] = {name: self.get_unscaled_state(by_id[k], name) for name in v}
        return saved

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        by_id = dict(zip(ids, params))
        for k, v in state_dict["state"].items():
            if k not in by_id:
                continue
            param = by_id[k]
            self.state[param] = {}
            for name, value in v.items():
                if value is None:
                    continue
                if self._keeps_remainder(param, name):
                    self.set_scaled_state(param, name, value)
                    assert value.dtype == torch.int16
                else:
                    self.set_scaled_state(param, name, value.float())

    # ---- the step ----

    def step(self, closure=None, grad_scaler=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            if len(group["params"]) == 0:
                continue
            group["step"] = group["step"] + 1 if "step" in group else 1
            half, full, has_fp16 = self._collect(group)
            remainders = self.master_weights and self.store_param_remainders and not has_fp16
            hyper = (group["lr"], *group["betas"], group["eps"], group["step"],
                     group["bias_correction"], group["weight_decay"])
            if half[0]:
                multi_tensor_adam(half if self.master_weights else half[:4], *hyper,
                                  remainders=remainders)
            if full[0]:
                multi_tensor_adam(full, *hyper)
        return loss

    def _collect(self, group):
        """The tensor lists of the group's two launches, as TE builds them: (grads, params,
        exp_avgs, exp_avg_sqs, masters) of the 16-bit parameters and (grads, params, exp_avgs,
        exp_avg_sqs) of the fp32 ones, in order, after initialising every parameter's state as
        TE does (even without a grad); and whether an fp16 parameter is among them."""
        half, full = [[], [], [], [], []], [[], [], [], []]
        has_fp16 = has_bf16 = False
        for p in group["params"]:
            state = self.state[p]
            if len(state) == 0:
                self.initialize_state(p, self.store_param_remainders and p.dtype == torch.bfloat16)
            grad = self._grad_of(p)
            if grad is None:
                continue
            if grad.data.is_sparse:
                raise RuntimeError("FusedAdam does not support sparse gradients.")
            if p.dtype in (torch.float16, torch.bfloat16):
                has_fp16 = has_fp16 or p.dtype == torch.float16
                has_bf16 = has_bf16 or p.dtype == torch.bfloat16
                lists = half
            elif p.dtype == torch.float32:
                lists = full
            else:
                raise RuntimeError("FusedAdam only support model weights in fp32, fp16, bf16 "
                                   "and fp8")
            for tensors, t in zip(lists, (grad.data, p.data, state["exp_avg"],
                                          state["exp_avg_sq"], state.get("master_param"))):
                tensors.append(t)
            if has_fp16 and has_bf16:
                if self.store_param_remainders:
                    raise RuntimeError("FusedAdam doesn't support a mix of FP16/BF16 weights + "
                                       "Store param remainder.")
                raise RuntimeError("FusedAdam does not support a mix of float16 and bfloat16 "
                                   "model weights.")
        return half, full, has_fp16


# ---- one multi-tensor launch ----

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _contiguous(t):
    """The launch accepts row-major tensors and channels-last ones (2-D and 3-D images)."""
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    return t.is_contiguous() or (t.dim() in formats
                                 and t.is_contiguous(memory_format=formats[t.dim()]))


def _check_list_shapes(tensor_lists, remainders):
    depths = (5,) if remainders else (4, 5)
    if len(tensor_lists) not in depths:
        raise RuntimeError(f"a FusedAdam launch takes {' or '.join(map(str, depths))} tensor "
                           f"lists, not {len(tensor_lists)}")
    count = len(tensor_lists[0])
    if count == 0:
        raise RuntimeError("a FusedAdam launch needs at least one tensor per list")
    for k, tensors in enumerate(tensor_lists):
        if len(tensors) != count:
            raise RuntimeError(f"tensor list {k} of a FusedAdam launch holds {len(tensors)} "
                               f"tensors, list 0 holds {count}")


def _check_placement(tensor_lists):
    """CUDA, one device, contiguous, one element count per tensor across the lists."""
    first = tensor_lists[0][0]
    if not first.is_cuda:
        raise RuntimeError("a FusedAdam launch takes CUDA tensors only, not " + str(first.device))
    for k, tensors in enumerate(tensor_lists):
        for j, t in enumerate(tensors):
            if t.device != first.device:
                raise RuntimeError(f"tensor {j} of list {k} is on {t.device}, the launch on "
                                   f"{first.device}")
            if not _contiguous(t):
                raise RuntimeError(f"tensor {j} of list {k} of a FusedAdam launch is not "
                                   "contiguous")
            if t.numel() != tensor_lists[0][j].numel():
                raise RuntimeError(f"tensor {j} of list {k} has {t.numel()} elements, its grad "
                                   f"{tensor_lists[0][j].numel()}")


def _check_one_dtype(tensors, what, allowed):
    dtype = tensors[0].dtype
    if dtype not in allowed:
        raise RuntimeError(f"a FusedAdam launch takes {what} in {allowed}, not {dtype}")
    for j, t in enumerate(tensors):
        if t.dtype != dtype:
            raise RuntimeError(f"{what} {j} is {t.dtype}, {what} 0 of the launch {dtype}")


def _check_dtypes(tensor_lists, remainders):
    grads, params, exp_avgs, exp_avg_sqs = tensor_lists[:4]
    _check_one_dtype(grads, "grad", KERNEL_DTYPES)
    _check_one_dtype(params, "param", (torch.bfloat16,) if remainders else KERNEL_DTYPES)
    for m, v in zip(exp_avgs, exp_avg_sqs):
        if (m.dtype, v.dtype) == (torch.bfloat16, torch.bfloat16):
            raise StandInRefused("the FusedAdam stand-in does not implement bf16 moments")
        if (m.dtype, v.dtype) != (torch.float32, torch.float32):
            raise RuntimeError(f"a FusedAdam launch takes moments both fp32 or both bf16, not "
                               f"{m.dtype} and {v.dtype}")
    master_dtype = torch.int16 if remainders else torch.float32
    for t in (tensor_lists[4] if len(tensor_lists) == 5 else []):
        if t.dtype != master_dtype:
            raise RuntimeError(f"a FusedAdam launch takes masters in {master_dtype}, not "
                               f"{t.dtype}")


def check_launch(tensor_lists, remainders=False):
    """Raises where TE's multi-tensor Adam launch refuses its tensor lists (the module's text)."""
    _check_list_shapes(tensor_lists, remainders)
    _check_placement(tensor_lists)
    _check_dtypes(tensor_lists, remainders)


def multi_tensor_adam(tensor_lists, lr, beta1, beta2, eps, step, bias_correction, decay,
                      remainders=False):
    """One AdamW-mode launch over (grads, params, exp_avgs, exp_avg_sqs[, masters]): each
    parameter's fp32 value (its master, or the master its remainder and bf16 bits stand for)
    stepped by the kernel, then written back as the kernel writes it."""
    check_launch(tensor_lists, remainders)
    bc1, bc2 = bias_corrections(beta1, beta2, step) if bias_correction else (1.0, 1.0)
    masters = tensor_lists[4] if len(tensor_lists) == 5 else [None] * len(tensor_lists[0])
    for g, p, m, v, master in zip(*tensor_lists[:4], masters):
        if remainders:
            target = join_remainder(p, master)
        elif master is not None:
            target = master
        else:
            target = p if p.dtype == torch.float32 else p.float()
        adamw_kernel(target, g.float(), m, v, lr, beta1, beta2, eps, decay, bc1, bc2)
        if remainders:
            split_remainder(target, p, master)
        elif target is not p:
            p.copy_(target)


# ---- TE's multi-tensor scale (transformer_engine.pytorch.optimizers) ----
#
# Contract, from TE's multi_tensor_applier and its scale kernel (multi_tensor_scale.cu, the
# ScaleFunctor of Apex's amp_C that TE carries):
# - multi_tensor_applier(op, noop_flag, tensor_lists, *args) calls op(chunk_size, noop_flag,
#   tensor_lists, *args), TE's chunk size 2048 * 32. Same.
# - multi_tensor_scale over two lists (inputs, outputs) of equal length, every tensor CUDA and
#   contiguous, each output as many elements as its input, dtypes fp32, fp16 or bf16: each
#   output element is the input's, widened to fp32, times the fp32 scale, rounded to the
#   output's dtype; where an input element is not finite the kernel sets noop_flag to 1 (and
#   still writes). TE raises on lists that do not fit. The stand-in computes the same values
#   with torch's fp32 multiply and its round-to-nearest-even copy, synchronously, unchunked.
# - What the stand-in serves of TE's optimizers module besides FusedAdam: these two. Not
#   multi_tensor_l2norm nor multi_tensor_scale_tensor, so an import of those (clip_grads.py's
#   block) fails as without TE and takes Megatron's local fallback.
CHUNK_SIZE = 2048 * 32


def multi_tensor_applier(op, noop_flag, tensor_lists, *args):
    return op(CHUNK_SIZE, noop_flag, tensor_lists, *args)


def _check_scale_lists(tensor_lists):
    if len(tensor_lists) != 2 or len(tensor_lists[0]) != len(tensor_lists[1]):
        raise RuntimeError("multi_tensor_scale takes two tensor lists of equal length")
    for src, dst in zip(*tensor_lists):
        for t in (src, dst):
            if not t.is_cuda or not t.is_contiguous():
                raise RuntimeError("multi_tensor_scale takes contiguous CUDA tensors only")
            if t.dtype not in KERNEL_DTYPES:
                raise RuntimeError(f"multi_tensor_scale takes {KERNEL_DTYPES}, not {t.dtype}")
        if src.numel() != dst.numel():
            raise RuntimeError(f"multi_tensor_scale: {src.numel()} elements in, "
                               f"{dst.numel()} out")


def multi_tensor_scale(chunk_size, noop_flag, tensor_lists, scale):
    _check_scale_lists(tensor_lists)
    factor = _f32(scale)
    for src, dst in zip(*tensor_lists):
        wide = src.float()
        if not bool(torch.isfinite(wide).all()):
            noop_flag.fill_(1)
        dst.copy_((wide * factor).view(dst.shape))
