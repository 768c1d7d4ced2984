"""The worker's wrapper_lifecycle op (wrappers.py) and overlap_training op (overlap.py),
checked by test_worker.py's run: the optimizers Megatron's factory builds besides the lone
distributed optimizer, and DDP's overlapped param all-gather, driven as the trainer drives them."""

import torch

from test_worker import DTYPES, bits, rounded


def lifecycle(wrapper, dtypes, frozen=False, save_after=1, resume="optimizer", experts=(),
              te=False):
    """A wrapper_lifecycle request over one parameter of each dtype, three steps; the
    parameters numbered in `experts` are expert parameters."""
    params = [{"dtype": d, "shape": [2, 2] if k else [3], "is_expert": k in experts}
              for k, d in enumerate(dtypes)]
    initial = [bits([0.5 * (k + 1) + i / 8 for i in range(4 if k else 3)], DTYPES[d])
               for k, d in enumerate(dtypes)]
    grads = [[bits([(s + 1) / 16 - i / 32 for i in range(4 if k else 3)])
              for k in range(len(dtypes))] for s in range(3)]
    return {"wrapper": wrapper, "frozen": frozen, "transformer_engine": te,
            "params": params, "initial": initial, "grads": grads, "save_after": save_after,
            "resume": resume}


def check_wrapper_lifecycle(worker):
    """wrapper_lifecycle: the factory's non-distributed optimizers resume as no interruption and
    move their parameters; a frozen rank's stubs move none; a checkpoint saved before the first
    step holds no optimizer state, so a resume that loads one is refused, as a strict load is."""
    request = lifecycle("float16", ["bf16", "fp32"])
    reply = worker("wrapper_lifecycle", **request)
    assert reply["ok"] and reply["optimizers"] == ["Float16OptimizerWithFloat16Params"], reply
    assert reply["stubs"] == [False] and reply["resumed"] == reply["reference"], reply
    assert reply["save_changed"] is None, reply
    assert reply["reference"] == reply["uninterrupted"] != request["initial"], reply
    reply = worker("wrapper_lifecycle", **lifecycle("fp32", ["fp32"], save_after=0,
                                                    resume="weights"))
    assert reply["ok"] and reply["optimizers"] == ["FP32Optimizer"], reply
    assert reply["resumed"] == reply["reference"] == reply["uninterrupted"], reply
    for wrapper in ("float16", "distributed"):
        request = lifecycle(wrapper, ["bf16"], frozen=True, resume="weights")
        reply = worker("wrapper_lifecycle", **request)
        assert reply["ok"] and reply["stubs"] == [True], reply
        assert reply["uninterrupted"] == reply["resumed"] == request["initial"], reply
    reply = worker("wrapper_lifecycle", **lifecycle("float16", ["bf16"], save_after=0))
    assert reply["ok"] and reply["call"] == "load", reply
    assert "holds nothing at optimizer.state.exp_avg" in reply["raised"], reply
    refused = worker("wrapper_lifecycle", **lifecycle("float16", ["bf16"], resume="later"))
    assert not refused["ok"] and "resume must be one of" in refused["error"], refused


def check_distributed_chain(worker):
    """wrapper_lifecycle with the distributed optimizer: the dense and the experts'
    DistributedOptimizer over one DDP chunk resume as no interruption; with the main params
    from an fp32 checkpoint, each main copy is the checkpoint's value, which bf16 cannot hold.
    With Transformer Engine: without it this tree's resume stops at F5."""
    request = lifecycle("distributed", ["bf16", "bf16"], experts=(1,), te=True)
    reply = worker("wrapper_lifecycle", **request)
    assert reply["ok"] and reply.get("optimizers") == ["DistributedOptimizer"] * 2, reply
    assert reply["stubs"] == [False, False], reply
    assert reply["resumed"] == reply["reference"] == reply["uninterrupted"], reply
    assert reply["uninterrupted"] != request["initial"], reply
    request = lifecycle("distributed", ["bf16", "bf16"], experts=(1,), te=True,
                        resume="main_params_from_checkpoint")
    reply = worker("wrapper_lifecycle", **request)
    assert reply["ok"] and reply["reference"] is None, reply
    assert reply["main_after_reload"] == reply["checkpoint_weights"], reply
    in_bf16 = [rounded(b, torch.bfloat16) for b in reply["checkpoint_weights"]]
    assert in_bf16 != reply["checkpoint_weights"], reply


def check_overlap_training(worker):
    """overlap_training: the steps with the param all-gather dispatched by DDP's forward
    pre-hooks equal those without, bit for bit, and move the parameters; an order that is not a
    permutation is refused."""
    params = [{"dtype": "bf16", "shape": [3]}, {"dtype": "fp32", "shape": [2]},
              {"dtype": "bf16", "shape": [2, 2]}]
    request = {"params": params, "order": [2, 0, 1], "bucket_size": 1,
               "initial": [bits([0.5, -0.25, 1.0]), bits([0.75, -0.5]), bits([1, 2, 3, 4])],
               "grads": [[bits([0.5, -0.25, 1.0]), bits([1.0, 2.0]), bits([0.25] * 4)]] * 2}
    reply = worker("overlap_training", **request)
    assert reply["ok"] and reply["overlapped_raised"] is None, reply
    assert reply["synchronous_raised"] is None and len(reply["overlapped"]) == 2, reply
    assert reply["overlapped"] == reply["synchronous"], reply
    assert reply["overlapped"][0] != request["initial"], reply
    refused = worker("overlap_training", **(request | {"order": [0, 0, 1]}))
    assert not refused["ok"] and "must be a permutation" in refused["error"], refused
