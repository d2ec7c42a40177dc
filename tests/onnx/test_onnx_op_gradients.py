"""Gradients of the operators the importer composes from minidl ops agree with finite
differences, so an imported graph trains with the right gradients, not just any gradients."""

import numpy as np
import pytest

import minidl as md
from minidl.onnx.interpreter import run_node
from minidl.onnx.registry import RunContext

rng = np.random.default_rng(7)


def data(*shape):
    return rng.standard_normal(shape)


def const(values, dtype=np.int64):
    return md.Tensor(np.asarray(values, dtype))


# op_type, attributes, the node's inputs in order: float64 arrays are differentiated, Tensors
# (shapes, indices, settings) and None (an input left out) are passed as they are.
CASES = {
    "conv_transpose": ("ConvTranspose", {"strides": [2, 2], "pads": [1, 0, 0, 1],
                                         "output_padding": [1, 0]},
                       [data(1, 2, 3, 3), data(2, 3, 2, 2)]),
    "conv_3d": ("Conv", {"pads": [1, 0, 0, 0, 1, 0], "strides": [1, 2, 1]},
                [data(1, 2, 3, 4, 3), data(2, 2, 2, 2, 2)]),
    "conv_1d_same": ("Conv", {"auto_pad": "SAME_LOWER"}, [data(2, 2, 5), data(3, 2, 2)]),
    "max_pool_dilated": ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 1],
                                     "pads": [1, 0, 0, 1]}, [data(1, 2, 5, 4)]),
    "average_pool_ceil": ("AveragePool", {"kernel_shape": [3], "strides": [2], "ceil_mode": 1,
                                          "pads": [2, 1]}, [data(2, 2, 6)]),
    "resize_linear": ("Resize", {"mode": "linear"},
                      [data(1, 2, 3, 4), None, const([1, 1, 1.5, 0.5], np.float32)]),
    "resize_cubic": ("Resize", {"mode": "cubic", "coordinate_transformation_mode":
                                "align_corners"},
                     [data(1, 1, 4, 4), None, None, const([1, 1, 6, 3])]),
    "pad_reflect": ("Pad", {"mode": "reflect"}, [data(2, 4, 3), const([0, 2, -1, 0, 1, 2])]),
    "pad_edge": ("Pad", {"mode": "edge"}, [data(3, 3), const([1, 0, 2, 2])]),
    "einsum_batched": ("Einsum", {"equation": "bij,bjk->bki"}, [data(2, 3, 4), data(2, 4, 5)]),
    "einsum_diagonal": ("Einsum", {"equation": "ii,i->i"}, [data(3, 3), data(3)]),
    "cumsum_reverse_exclusive": ("CumSum", {"reverse": 1, "exclusive": 1}, [data(3, 4), const(1)]),
    "lrn": ("LRN", {"size": 3, "alpha": 0.1, "beta": 0.75, "bias": 2.0}, [data(2, 5, 3)]),
    "instance_norm": ("InstanceNormalization", {}, [data(2, 3, 4), data(3), data(3)]),
    "gather_elements": ("GatherElements", {"axis": 1},
                        [data(3, 4), const([[0, 3, 3], [1, -1, 0], [2, 2, 2]])]),
    "scatter_nd": ("ScatterND", {}, [data(4, 3), const([[3], [1]]), data(2, 3)]),
    "top_k": ("TopK", {"axis": 0}, [data(5, 3), const([2])]),
    "tile": ("Tile", {}, [data(2, 3), const([2, 3])]),
    "depth_to_space": ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [data(1, 8, 2, 3)]),
    "reduce_log_sum_exp": ("ReduceLogSumExp", {"keepdims": 0}, [data(3, 4), const([1])]),
    "reduce_prod": ("ReduceProd", {}, [data(3, 4), const([0])]),
    "reduce_l2": ("ReduceL2", {}, [data(3, 4)]),
    "softplus": ("Softplus", {}, [data(3, 4) * 10]),
    "elu": ("Elu", {"alpha": 0.5}, [data(3, 4) * 10]),
    "hard_swish": ("HardSwish", {}, [data(3, 4) * 4]),
    "sin": ("Sin", {}, [data(3, 4)]),
    "mod": ("Mod", {"fmod": 0}, [data(3, 4) * 5, const(np.full((3, 4), 1.7), np.float64)]),
    "attention_causal_gqa_with_cache": (
        "Attention", {"is_causal": 1}, [data(2, 4, 3, 4), data(2, 2, 3, 4), data(2, 2, 3, 5),
                                        None, data(2, 2, 2, 4), data(2, 2, 2, 5)]),
    "attention_3d_float_mask_softcap": (
        "Attention", {"q_num_heads": 2, "kv_num_heads": 2, "softcap": 2.0},
        [data(1, 3, 4), data(1, 5, 4), data(1, 5, 6), data(3, 5)]),
    "rms_normalization": ("RMSNormalization", {"axis": -2}, [data(2, 3, 4), data(3, 4)]),
    "rotary_embedding": ("RotaryEmbedding", {"num_heads": 2, "rotary_embedding_dim": 2},
                         [data(2, 3, 8), data(5, 1), data(5, 1),
                          const([[0, 1, 4], [2, 2, 3]])]),
    "softmax_cross_entropy_weighted_ignore": (
        "SoftmaxCrossEntropyLoss", {"ignore_index": 1}, [data(3, 4, 2), const([[0, 1], [3, 2],
                                                                              [1, 0]]),
                                                         data(4) ** 2]),
    "nll_sum": ("NegativeLogLikelihoodLoss", {"reduction": "sum"}, [data(3, 5),
                                                                    const([4, 0, 2])]),
    "lp_pool": ("LpPool", {"kernel_shape": [2, 2], "p": 3, "pads": [1, 0, 0, 1]},
                [data(1, 2, 3, 3)]),
    "group_norm": ("GroupNormalization", {"num_groups": 2}, [data(2, 4, 3), data(4), data(4)]),
    "lp_normalization": ("LpNormalization", {"axis": 1, "p": 2}, [data(3, 4)]),
    "cumprod_reverse_exclusive": ("CumProd", {"reverse": 1, "exclusive": 1}, [data(3, 4),
                                                                             const(1)]),
    "lstm_bidirectional_peepholes": (
        "LSTM", {"hidden_size": 2, "direction": "bidirectional"},
        [data(3, 2, 3), data(2, 8, 3), data(2, 8, 2), data(2, 16), const([3, 2], np.int32),
         data(2, 2, 2), data(2, 2, 2), data(2, 6)]),
    "gru_reverse": ("GRU", {"hidden_size": 2, "direction": "reverse"},
                    [data(3, 2, 3), data(1, 6, 3), data(1, 6, 2), data(1, 12)]),
    "grid_sample_bicubic_border": ("GridSample", {"mode": "cubic", "padding_mode": "border"},
                                   [data(1, 2, 4, 3), rng.uniform(-1.2, 1.2, (1, 3, 2, 2))]),
    "grid_sample_linear_reflection": ("GridSample", {"padding_mode": "reflection"},
                                      [data(2, 2, 4, 3), rng.uniform(-2.9, 2.9, (2, 3, 2, 2))]),
    "grid_sample_linear_zeros_aligned": ("GridSample", {"align_corners": 1},
                                         [data(1, 1, 3, 5), rng.uniform(-1.3, 1.3, (1, 4, 2, 2))]),
    "affine_grid": ("AffineGrid", {}, [data(2, 2, 3), const([2, 1, 3, 4])]),
    "reverse_sequence": ("ReverseSequence", {"time_axis": 1, "batch_axis": 0},
                         [data(3, 4, 2), const([4, 1, 2])]),
    "center_crop_pad": ("CenterCropPad", {"axes": [0, 2]}, [data(5, 2, 3), const([2, 6])]),
    "layer_norm_axis_1": ("LayerNormalization", {"axis": 1}, [data(2, 3, 4), data(3, 4),
                                                              data(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    op_type, attributes, inputs = CASES[name]
    varied = [i for i, v in enumerate(inputs) if isinstance(v, np.ndarray)]

    def evaluate(arrays, track=False):
        tensors = {i: md.Tensor(a, requires_grad=track) for i, a in zip(varied, arrays)}
        node_inputs = [tensors.get(i, v) for i, v in enumerate(inputs)]
        out = run_node(op_type, node_inputs, attributes, RunContext(outputs=1))
        return tensors, out[0] if isinstance(out, tuple) else out

    arrays = [inputs[i] for i in varied]
    weights = rng.standard_normal(evaluate(arrays)[1].shape)
    tensors, out = evaluate(arrays, track=True)
    (out * md.Tensor(weights)).sum().backward()
    step = 1e-6
    for index, array in enumerate(arrays):
        numeric = np.zeros_like(array)
        for position in np.ndindex(array.shape):
            shifted = [a.copy() for a in arrays]
            shifted[index][position] += step
            up = (evaluate(shifted)[1].numpy() * weights).sum()
            shifted[index][position] -= 2 * step
            down = (evaluate(shifted)[1].numpy() * weights).sum()
            numeric[position] = (up - down) / (2 * step)
        np.testing.assert_allclose(tensors[varied[index]].grad.numpy(), numeric, rtol=1e-5,
                                   atol=1e-6, err_msg=f"{name}: input {varied[index]}")
