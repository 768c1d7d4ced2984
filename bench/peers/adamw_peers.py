"""The Python-side AdamW peers of the benchmarks, as their users configure them on CPU tensors.

sc_bench starts this harness once per row (bench/peer_bench.cc) and the peer test once per peer
(tests/peer_adamw_test.cc); both name the same peers, built by the same code below, so a row that
is timed is a row whose arithmetic is checked.

  time  --peer P --sizes FILE --threads T
        one fp32 parameter per size in FILE (whitespace-separated element counts), values drawn
        as the C++ rows draw theirs (param U(-1, 1), grad U(-0.01, 0.01)); the optimizer with
        lr 1e-3 and weight decay 0.01; one step to make the state and one more to warm up,
        untimed. Prints `peer <label>`; then, for each line `step` it reads, takes one step, timed
        alone (the optimizer's step call only: the harness allocates nothing in between), and
        prints its seconds. Ends at the end of its input.
  check --peer P --dir DIR [--mutant M]
        reads DIR/sizes.txt, param.f32, grad.f32 (the tensors' values one after another, raw
        little-endian fp32) and DIR/hyper.txt (lr beta1 beta2 eps weight_decay), takes one step,
        writes DIR/P.param.f32, P.exp_avg.f32 and P.exp_avg_sq.f32 in the same layout.

Exit 2 with one line on stderr for bad input or a peer that cannot be built here.
"""

import argparse
import os
import sys
import time

OUT = sys.stdout  # the protocol's lines: main() keeps them apart from what libraries print

def fail(message):
    print(f"adamw_peers: {message}", file=sys.stderr)
    sys.exit(2)


def torch_adamw(mode):
    def build(params, hyper):
        import torch
        lr, beta1, beta2, eps, wd = hyper
        flags = {"single": {"foreach": False}, "foreach": {"foreach": True},
                 "fused": {"fused": True}}[mode]
        opt = torch.optim.AdamW(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd,
                                **flags)
        flag = ", ".join(f"{k}={v}" for k, v in flags.items())
        return opt, f"torch {torch.__version__} torch.optim.AdamW({flag})"
    return build


def deepspeed_cpu_adam(adamw_mode):
    def build(params, hyper):
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        try:
            import deepspeed
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            from deepspeed.ops.op_builder import CPUAdamBuilder
        except ImportError as e:
            fail(f"DeepSpeed is not installed here ({e}): scripts/python-env --peers makes its "
                 "environment")
        lr, beta1, beta2, eps, wd = hyper
        opt = DeepSpeedCPUAdam(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd,
                               adamw_mode=adamw_mode)
        simd = CPUAdamBuilder().simd_width().replace("-D__", "").strip("_")
        return opt, (f"deepspeed {deepspeed.__version__} DeepSpeedCPUAdam(adamw_mode="
                     f"{adamw_mode}), op built for {simd}")
    return build


# The peers by name: each builds its optimizer over `params` with hyper-parameters
# (lr, beta1, beta2, eps, weight_decay) and returns it with the row's label.
PEERS = {
    "torch-single": torch_adamw("single"),
    "torch-foreach": torch_adamw("foreach"),
    "torch-fused": torch_adamw("fused"),
    "deepspeed-cpu-adam": deepspeed_cpu_adam(adamw_mode=True),
}
# Known-bad configurations the peer test must reject: DeepSpeed with L2 regularisation
# (adamw_mode=False) in place of AdamW's decoupled weight decay.
MUTANTS = {
    "deepspeed-l2": deepspeed_cpu_adam(adamw_mode=False),
}


def read_sizes(path):
    try:
        with open(path) as f:
            sizes = [int(word) for word in f.read().split()]
    except (OSError, ValueError) as e:
        fail(f"cannot read the sizes in {path}: {e}")
    if not sizes or any(n < 0 for n in sizes):
        fail(f"{path} must hold one or more element counts, none negative")
    return sizes


def cmd_time(args):
    import torch
    torch.set_num_threads(args.threads)
    sizes = read_sizes(args.sizes)
    params = []
    with torch.no_grad():
        for n in sizes:
            p = torch.nn.Parameter(torch.empty(n, dtype=torch.float32).uniform_(-1, 1))
            p.grad = torch.empty(n, dtype=torch.float32).uniform_(-1e-2, 1e-2)
            params.append(p)
    opt, label = PEERS[args.peer](params, (1e-3, 0.9, 0.999, 1e-8, 0.01))
    opt.step()
    opt.step()
    print(f"peer {label}", file=OUT, flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            fail(f"unknown request {line.strip()!r} (step)")
        t0 = time.perf_counter_ns()
        opt.step()
        t1 = time.perf_counter_ns()
        print(f"{(t1 - t0) * 1e-9:.9f}", file=OUT, flush=True)


def read_f32(path, count):
    import numpy
    values = numpy.fromfile(path, dtype="<f4")
    if values.size != count:
        fail(f"{path} holds {values.size} fp32 values where the sizes say {count}")
    return values


def cmd_check(args):
    import numpy
    import torch
    sizes = read_sizes(os.path.join(args.dir, "sizes.txt"))
    try:
        with open(os.path.join(args.dir, "hyper.txt")) as f:
            hyper = tuple(float(word) for word in f.read().split())
    except (OSError, ValueError) as e:
        fail(f"cannot read hyper.txt: {e}")
    if len(hyper) != 5:
        fail("hyper.txt must hold lr beta1 beta2 eps weight_decay")
    total = sum(sizes)
    param = read_f32(os.path.join(args.dir, "param.f32"), total)
    grad = read_f32(os.path.join(args.dir, "grad.f32"), total)
    params, at = [], 0
    for n in sizes:
        p = torch.nn.Parameter(torch.from_numpy(param[at:at + n].copy()))
        p.grad = torch.from_numpy(grad[at:at + n].copy())
        params.append(p)
        at += n
    build = MUTANTS[args.mutant] if args.mutant else PEERS[args.peer]
    opt, label = build(params, hyper)
    opt.step()
    name = args.mutant or args.peer
    for key, out in (("param", None), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
        parts = [p.detach() if out is None else opt.state[p][out] for p in params]
        values = numpy.concatenate([t.reshape(-1).numpy() for t in parts]) if parts else []
        numpy.asarray(values, dtype="<f4").tofile(os.path.join(args.dir, f"{name}.{key}.f32"))
    print(f"peer {label}", file=OUT)


def main():
    # The protocol keeps the real standard output; whatever a library prints goes to stderr.
    global OUT
    OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    parser = argparse.ArgumentParser(description="The Python-side AdamW peers of the benchmarks.")
    sub = parser.add_subparsers(dest="command", required=True)
    timing = sub.add_parser("time")
    timing.add_argument("--peer", required=True, choices=sorted(PEERS))
    timing.add_argument("--sizes", required=True)
    timing.add_argument("--threads", type=int, required=True)
    check = sub.add_parser("check")
    check.add_argument("--peer", choices=sorted(PEERS))
    check.add_argument("--mutant", choices=sorted(MUTANTS))
    check.add_argument("--dir", required=True)
    args = parser.parse_args()
    if args.command == "time":
        if args.threads < 1:
            fail("--threads must be at least 1")
        cmd_time(args)
    else:
        if (args.peer is None) == (args.mutant is None):
            fail("check takes one of --peer and --mutant")
        cmd_check(args)


if __name__ == "__main__":
    main()
