"""A stand-in for Transformer Engine's FusedAdam, for cases that run with Transformer Engine on a
machine that has none (TE needs CUDA and its own build).

It is written from TE's FusedAdam (transformer_engine/pytorch/optimizers/fused_adam.py) and its
AdamW-mode kernels (multi_tensor_adam.cu: AdamFunctor, AdamFunctorMaster,
AdamFunctorMasterParamRemainder), and implements what Megatron-Core asks of it: the constructor's
options, a step count per group, master weights (fp32, or the int16 remainder bits of a bf16
parameter), decoupled gradients, fp32 optimizer states with get_unscaled_state /
set_scaled_state, and the state_dict / load_state_dict overrides. What Megatron never asks of it
here (capturable, AMSGrad, L2 mode, fp8 parameters, non-fp32 states) is refused by name.

The arithmetic is the kernel's, in fp32, one rounding per operation in the kernel's order, with
the bias corrections computed as TE's host code does: `1 - pow(beta, step)` from the fp32 beta,
in double, then rounded to fp32.
"""

import numpy as np
import torch

VERSION = "2.1.0+shardcheck.stand.in"  # satisfies Megatron's is_te_min_version("2.1.0") checks


class StandInRefused(RuntimeError):
    """What the stand-in does not implement; real TE would."""


def _f32(x):
    return float(np.float32(x))


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
        refused = {"capturable": capturable, "adam_w_mode=False": not adam_w_mode,
                   "non-fp32 states": {master_weight_dtype, exp_avg_dtype,
                                       exp_avg_sq_dtype} != {torch.float32}}
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
            half, full = self._collect(group)
            self._launch(group, half, master=self.master_weights)
            self._launch(group, full, master=False)
        return loss

    def _collect(self, group):
        """The group's (param, grad, state) lists for 16-bit and fp32 parameters, in order,
        initialising every parameter's state first as TE does (even without a grad)."""
        half, full = [], []
        has_fp16 = has_bf16 = False
        for p in group["params"]:
            state = self.state[p]
            if len(state) == 0:
                self.initialize_state(p, self.store_param_remainders and p.dtype == torch.bfloat16)
            grad = self._grad_of(p)
            if grad is None:
                continue
            if p.dtype in (torch.float16, torch.bfloat16):
                has_fp16 = has_fp16 or p.dtype == torch.float16
                has_bf16 = has_bf16 or p.dtype == torch.bfloat16
                half.append((p, grad, state))
            elif p.dtype == torch.float32:
                full.append((p, grad, state))
            else:
                raise RuntimeError("FusedAdam only support model weights in fp32, fp16, bf16 "
                                   "and fp8")
            if has_fp16 and has_bf16:
                if self.store_param_remainders:
                    raise RuntimeError("FusedAdam doesn't support a mix of FP16/BF16 weights + "
                                       "Store param remainder.")
                raise RuntimeError("FusedAdam does not support a mix of float16 and bfloat16 "
                                   "model weights.")
        return half, full

    def _launch(self, group, work, master):
        """One multi-tensor launch: each tensor's fp32 view of the parameter stepped by the kernel,
        then written back as the kernel writes it."""
        if not work:
            return
        beta1, beta2 = group["betas"]
        bc1, bc2 = (bias_corrections(beta1, beta2, group["step"]) if group["bias_correction"]
                    else (1.0, 1.0))
        remainders = master and self.store_param_remainders and all(
            p.dtype == torch.bfloat16 for p, _, _ in work)
        for p, grad, state in work:
            data = p.data
            if remainders:
                target = join_remainder(data, state["master_param"])
            elif master:
                target = state["master_param"]
            else:
                target = data if data.dtype == torch.float32 else data.float()
            adamw_kernel(target, grad.data.float(), state["exp_avg"], state["exp_avg_sq"],
                         group["lr"], beta1, beta2, group["eps"], group["weight_decay"], bc1, bc2)
            if remainders:
                split_remainder(target, data, state["master_param"])
            elif target is not data:
                data.copy_(target)
