"""A param-and-grad buffer built without a pg_collection takes its groups from parallel_state.

`_ParamAndGradBuffer` takes an optional `pg_collection`; without one it reads the data-parallel
group (with context parallelism) and the tensor-parallel group from `parallel_state`, as set by
`initialize_model_parallel`. At d8b71082 (and main d98e8a64, and the megatron-core 0.19.2 release)
that branch calls `parallel_state.get_data_and_context_parallel_group`, which parallel_state does
not define: every such buffer raises AttributeError when it is built.
"""

import pytest
import torch

from megatron.core import parallel_state
from megatron.core.distributed.distributed_data_parallel_config import (
    DistributedDataParallelConfig,
)
from megatron.core.distributed.param_and_grad_buffer import (
    _ParamAndGradBuffer,
    group_params_for_buffers,
)


@pytest.fixture
def model_parallel():
    """Model parallelism of size 1 over the process's world, left initialized for the process."""
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)


def test_a_buffer_without_a_pg_collection_uses_parallel_states_groups(model_parallel):
    ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True)
    params = [torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16, device="cuda")),
              torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16, device="cuda"))]
    names = {p: f"p{k}" for k, p in enumerate(params)}
    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    ((key, (in_buffer, indices)),) = group_params_for_buffers(params, False).items()
    try:
        buffer = _ParamAndGradBuffer(ddp_config, key.param_dtype, key.grad_dtype,
                                     [(p, names[p]) for p in in_buffer], group, None, names,
                                     1.0, indices, False, None)
    except AttributeError as e:
        pytest.fail(f"a buffer built without a pg_collection raised AttributeError: {e}")
    assert buffer.dp_cp_group is group
    assert buffer.tp_group is parallel_state.get_tensor_model_parallel_group()
