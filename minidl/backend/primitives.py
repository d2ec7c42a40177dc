"""The primitive list: the whole contract between differentiable ops and a backend.

A backend is an instance of a subclass of :class:`Backend` that implements every primitive below
with the signature and meaning written here. Ops, layers, optimizers and the random generators
use nothing else to compute, which is what lets one op definition run on every device: a new
device is one new subclass, registered with :func:`minidl.backend.register_backend`.

Rules that hold for every primitive unless its own docstring says otherwise:

* **Arrays** are the backend's own kind (NumPy ndarrays for the CPU backends, device arrays
  elsewhere). The callers read four attributes of an array and nothing else: ``shape`` (a tuple
  of Python ints), ``dtype`` (a ``numpy.dtype``), ``ndim`` and ``size``. These are metadata kept
  on the host: reading them never waits for the device. Every other access (values, operators,
  ``__array__``) goes through a primitive, and values cross to the host only in ``to_numpy``.
* **Host arguments.** Shapes, axes, indices into shapes and dtypes are plain Python values (a
  dtype is anything ``numpy.dtype`` accepts). Hyperparameters (a learning rate, ``eps``) are
  Python floats: they travel as kernel arguments, never as arrays.
* **Scalars as operands.** Where an elementwise primitive takes an array operand it also accepts
  a Python ``bool``/``int``/``float`` or a NumPy scalar. A Python scalar is *weak*: the result
  has the array operand's dtype (``mul(float32_array, 0.5)`` is float32). Passing a scalar costs
  no host-to-device copy, so ops use scalars rather than 0-d arrays for constants.
* **Dtypes.** Elementwise results have the common dtype of their array operands under NumPy's
  promotion rules (the ops first cast an integer operand meeting a floating one to the floating
  dtype, so float32 meets float32); comparisons and logical ops return ``bool``. Floating results
  keep the input's precision: float32 math is done in float32, never silently widened.
* **Aliasing.** Results are new arrays that share no memory with the inputs, except where a
  docstring says "may alias": then the result may be a view of an input, and the caller must
  not write into either while the other is still in use. In-place primitives end in ``_`` (as in
  PyTorch) and return None; they write into their first argument and nothing else.
* **Plan steps.** The ``plan_*`` primitives serve ``md.compile`` (:mod:`minidl.inference`).
  Instead of a result each returns a :class:`PlanStep`: the op prepared once for fixed shapes,
  called once per run of the plan. Where the backend can, the step writes every call into
  buffers it made once (its ``output``), so that a plan allocates nothing per call; a caller
  copies what it keeps past the next call.
* **Errors.** Bad host arguments raise ``ValueError`` (or ``IndexError`` for indices, as noted);
  a primitive never returns garbage for an input it could have rejected.

The list is short on purpose: each primitive is a kernel in every backend, so one that the
others compose at the same speed is not one (``ones`` is ``full`` of 1, ``a > b`` is ``b < a``,
``min`` is ``max`` of the order-reversed values). Those compositions live in
:mod:`minidl.backend.composed`, written once for every backend; a fused primitive (batch norm,
the softmax gradient) stays only while it is measured faster than its composed form on the
benchmark shapes (``benchmarks/bench_fused_primitives.py``).

The list is checked per backend, by signature and by behaviour, in
``tests/backend/test_backend_primitive_list.py``; an opaque-array backend in the tests proves
that nothing above the backend reaches around it.
"""

from __future__ import annotations

import inspect


class PlanStep:
    """One op of a compiled plan, prepared for fixed shapes.

    ``step(x)`` returns the op's result for ``x``, an array of the shape and dtype the step was
    prepared for. ``output`` says where that result lives: a step that owns its memory returns
    the same array, ``output``, from every call (made when the step was prepared, possibly a view
    of a larger buffer), rewritten each time; a step whose backend cannot write into a given
    array (it composes the op's own primitives) leaves ``output`` None and returns a new array
    per call.
    """

    output = None

    def __call__(self, x):
        raise NotImplementedError

    def fuse_relu(self) -> bool:
        """From now on write ReLU(result) instead of the result; True if this step can, False
        if not (the caller then keeps the ReLU as a step of its own). The caller asks only when
        a ReLU is the sole reader of the step's result."""
        return False

    def output_view(self, shape):
        """``output`` reshaped to ``shape`` as a view that every call refreshes (made once, so
        a plan's reshape of this step's result costs nothing per call), or None where there is
        no ``output`` or its layout allows no such view (then the caller reshapes each call)."""
        return None

    def follow(self, previous: "PlanStep", sole_reader: bool) -> None:
        """A hint from the caller: this step's ``x`` is always ``previous.output`` (a step of
        the same backend, with an ``output``, that runs before this one) and, if
        ``sole_reader``, nothing else reads it.
        A backend may then hand the values over without a copy (read the previous step's buffer
        directly, or, when this step is the sole reader, have the previous step write straight
        into this step's input buffer instead of its ``output``); by default nothing changes."""


class Backend:
    """The contract every backend implements; each method here documents one primitive.

    Subclasses override every primitive (as a ``staticmethod`` or a plain method with the same
    parameters). ``name`` identifies the implementation (``"numba"``, ``"numpy"``, ``"cuda"``);
    the device a tensor lives on is a separate thing (``"cpu"``, ``"cuda:1"``): see
    :func:`minidl.backend.get_backend`.
    """

    name = "abstract"

    def on_device(self, index: int) -> "Backend":
        """The backend serving device number ``index`` of this kind (``cuda:1`` -> index 1).

        Backends whose arrays carry their device (or that have only one) return ``self``; a
        multi-device backend returns one bound to that device, so creation primitives (``zeros``,
        ``from_numpy``, the random draws) allocate there.
        """
        if index != 0:
            raise ValueError(f"the {self.name} backend has only device 0, not device {index}")
        return self

    def __repr__(self) -> str:
        return f"<minidl backend {self.name!r}>"

    # -- creation and transfer -------------------------------------------------------------------

    @staticmethod
    def from_numpy(array):
        """A backend array with the values, shape and dtype of the NumPy ``array``.

        The one host-to-device copy. May alias ``array`` on a host backend (the CPU backends
        return it unchanged when it is already an ndarray).
        """
        raise NotImplementedError

    @staticmethod
    def to_numpy(array):
        """The values as a NumPy ndarray of the same shape and dtype: the one device-to-host copy.

        May alias ``array`` on a host backend.
        """
        raise NotImplementedError

    @staticmethod
    def zeros(shape, dtype):
        """A new array of ``shape`` filled with 0."""
        raise NotImplementedError

    @staticmethod
    def full(shape, value, dtype):
        """A new array of ``shape`` filled with the Python scalar ``value`` (no host copy: the
        value is a kernel argument)."""
        raise NotImplementedError

    @staticmethod
    def astype(array, dtype):
        """The values converted to ``dtype`` (C casting: floats to ints truncate toward zero).

        May alias: returns ``array`` itself when it already has ``dtype``.
        """
        raise NotImplementedError

    @staticmethod
    def copy(array):
        """A new array with the same values, owning its memory (``owns_memory`` is True) and laid
        out row-major, as the in-place optimizer kernels need."""
        raise NotImplementedError

    # -- in place and memory ---------------------------------------------------------------------

    @staticmethod
    def assign_(target, source):
        """Copy ``source`` (an array or a scalar, broadcast to ``target``'s shape, cast with
        same-kind casting) into ``target``, in place. ``ValueError`` when the shapes do not
        broadcast or the cast would change kind (float into int)."""
        raise NotImplementedError

    @staticmethod
    def setitem_(array, index, value):
        """``array[index] = value`` in place; ``index`` follows :meth:`getitem`'s rules, ``value``
        is an array or a scalar broadcast to the selection. ``IndexError`` when out of range."""
        raise NotImplementedError

    @staticmethod
    def owns_memory(array) -> bool:
        """Whether ``array`` is its own writable storage: not a view of another array, not
        read-only, not a broadcast. Autograd hands such an array to ``.grad`` without a copy;
        anything else is copied first, so no two tensors ever share a gradient buffer."""
        raise NotImplementedError

    # -- elementwise math (operands broadcast; scalars allowed, see the module docstring) ---------

    @staticmethod
    def add(a, b):
        """a + b."""
        raise NotImplementedError

    @staticmethod
    def sub(a, b):
        """a - b."""
        raise NotImplementedError

    @staticmethod
    def mul(a, b):
        """a · b."""
        raise NotImplementedError

    @staticmethod
    def div(a, b):
        """a / b, true division (IEEE: x/0 is ±inf, 0/0 is nan; no error)."""
        raise NotImplementedError

    @staticmethod
    def floor_divide(a, b):
        """floor(a / b), rounding toward -inf as Python's ``//`` (x // 0 is ±inf or nan for
        floats; integer division by zero is 0, with no error)."""
        raise NotImplementedError

    @staticmethod
    def remainder(a, b):
        """a - floor(a / b)·b: the remainder with the divisor's sign, as Python's ``%``."""
        raise NotImplementedError

    @staticmethod
    def power(a, b):
        """a ** b (floating a: nan for a negative base with a non-integer exponent)."""
        raise NotImplementedError

    @staticmethod
    def math_function(a, name):
        """Python's ``math.<name>`` of every element of floating a, in a's dtype, for ``name`` in
        :data:`MATH_FUNCTIONS` (exp, log and sqrt; the trigonometric and hyperbolic functions,
        tanh among them, their inverses; and erf). One primitive for all of them, because a
        device implements each the same way: one elementwise pass over a scalar function. As
        NumPy: nan outside a function's domain (log or sqrt below 0, asin of 2, sin of inf), ±inf
        at a pole (log of 0, atanh of ±1) and where exp/sinh/cosh overflow. ValueError naming
        ``name`` otherwise."""
        raise NotImplementedError

    @staticmethod
    def sigmoid(a):
        """1 / (1 + e^-a), without overflow for large |a| (floating a)."""
        raise NotImplementedError

    @staticmethod
    def relu(a):
        """max(a, 0), in a's dtype."""
        raise NotImplementedError

    @staticmethod
    def relu_backward(grad, x):
        """grad where x > 0, else 0 (0 at x == 0, as PyTorch); grad's dtype."""
        raise NotImplementedError

    @staticmethod
    def abs(a):
        """|a|."""
        raise NotImplementedError

    @staticmethod
    def maximum(a, b):
        """The larger of a and b (nan if either is nan); for bools, a or b."""
        raise NotImplementedError

    @staticmethod
    def minimum(a, b):
        """The smaller of a and b (nan if either is nan); for bools, a and b."""
        raise NotImplementedError

    @staticmethod
    def where(condition, a, b):
        """a where the bool ``condition`` holds, else b (all three broadcast)."""
        raise NotImplementedError

    @staticmethod
    def equal(a, b):
        """a == b, bool."""
        raise NotImplementedError

    @staticmethod
    def less(a, b):
        """a < b, bool. With ``equal``, the only comparisons: the others (>, <=, >=, !=) and the
        logical operations are composed of these two, ``maximum`` and ``minimum``
        (:mod:`minidl.backend.composed`)."""
        raise NotImplementedError

    # -- reductions (axis: None for all, an int, or a tuple of non-negative ints) ---------------

    @staticmethod
    def sum(x, axis=None, keepdims=False):
        """Σ over ``axis``. Floating x sums in its own dtype; bool/int x gives int64."""
        raise NotImplementedError

    @staticmethod
    def max(x, axis=None, keepdims=False):
        """The largest element over ``axis`` (``ValueError`` over an empty axis)."""
        raise NotImplementedError

    @staticmethod
    def argmax(x, axis=None, keepdims=False):
        """int64 index of the largest element along the int ``axis`` (flattened when None);
        the first one on ties."""
        raise NotImplementedError

    # -- movement and indexing -------------------------------------------------------------------

    @staticmethod
    def reshape(x, shape):
        """The same elements (C order) in ``shape``. May alias x."""
        raise NotImplementedError

    @staticmethod
    def transpose(x, axes):
        """Axes permuted by the tuple ``axes``. May alias x."""
        raise NotImplementedError

    @staticmethod
    def broadcast_to(x, shape):
        """x broadcast to ``shape`` (NumPy's rules). May alias x; read-only."""
        raise NotImplementedError

    @staticmethod
    def getitem(x, index):
        """``x[index]`` with ``index`` a tuple of ints, slices, None, Ellipsis and integer arrays
        of this backend (advanced indexing, NumPy's rules). May alias x when no array is in the
        index. ``IndexError`` when out of range."""
        raise NotImplementedError

    @staticmethod
    def index_add(shape, index, values, dtype):
        """Zeros of ``shape`` and ``dtype`` with ``values`` added at ``index`` (getitem's rules):
        getitem's adjoint. Repeated indices accumulate."""
        raise NotImplementedError

    @staticmethod
    def take(table, indices):
        """Rows of ``table`` picked by the integer array ``indices``: shape
        ``indices.shape + table.shape[1:]`` (a gather along axis 0). ``IndexError`` naming the
        first index outside [0, len(table)) (negative indices are errors, not wrapped); a device
        backend may raise it at its next synchronisation instead (CUDA does)."""
        raise NotImplementedError

    @staticmethod
    def one_hot(indices, num_classes, dtype):
        """``indices.shape + (num_classes,)`` of ``dtype``: 1 at each index, 0 elsewhere.
        ``IndexError`` naming the first index outside [0, num_classes) (at the next
        synchronisation on a device backend that defers its checks, as CUDA)."""
        raise NotImplementedError

    @staticmethod
    def nonzero(mask):
        """The positions where the bool ``mask`` is true, as a tuple of int64 arrays (one per
        axis), C order. The one primitive whose output shape depends on values: a device backend
        must wait for the count."""
        raise NotImplementedError

    @staticmethod
    def concatenate(arrays, axis):
        """The arrays (a sequence) joined along an existing ``axis``."""
        raise NotImplementedError

    # -- linear algebra --------------------------------------------------------------------------

    @staticmethod
    def matmul(a, b, transpose_a=False, transpose_b=False, *, a_axes=None, b_axes=None,
               out_axes=None, sum_axis=None):
        """Matrix product of arrays with at least 2 dimensions; leading (batch) axes broadcast.
        Equal floating dtypes; the result has that dtype. ``transpose_a``/``transpose_b``
        multiply by an operand with its last two axes swapped without making that transposed
        copy (BLAS's ``transa``/``transb``): the result equals ``matmul(transpose(a), b)``.

        The keywords make it a strided batched product (cuBLAS's ``gemmStridedBatched``: each
        operand read through a batch stride and a leading dimension), so that a layout such as
        im2col's (K, N·L) feeds the product as it lies. ``a_axes``/``b_axes`` read an operand
        as ``transpose(a, a_axes)`` (before ``transpose_a``); ``sum_axis`` sums the product over
        that batch axis (of the product's batch axes, counted from 0); ``out_axes`` returns
        ``transpose(product, out_axes)``, C-ordered. Each is what the NumPy expression says,
        with no transposed copy made where the backend can read or write in place."""
        raise NotImplementedError

    # -- random numbers --------------------------------------------------------------------------

    @staticmethod
    def random_uniform(shape, dtype, key, counter):
        """Samples of U[0, 1) in floating ``dtype`` from the Philox4x32-10 stream at ``key`` (two
        uint32 words, a tuple of ints) starting at block ``counter`` (an int < 2**64).

        Counter-based: the stream is a pure function of (key, counter), so any device computes
        the same numbers and a generator's state is just its key and counter. Block b yields four
        32-bit words; the words of blocks counter, counter+1, ... are consumed in order, element
        i (C order) taking word i (float32: its top 24 bits times 2**-24; float16: top 11 bits
        times 2**-11) or words 2i, 2i+1 (float64: 27 + 26 bits times 2**-53). Uses :func:`random_blocks` blocks.
        """
        raise NotImplementedError

    @staticmethod
    def random_normal(shape, dtype, key, counter):
        """Samples of N(0, 1) from the same stream: element i takes two 53-bit uniforms u1, u2
        (words 4i..4i+3 of the stream) and is sqrt(-2 ln(1 - u1)) · cos(2π u2) (Box-Muller),
        computed in float64 and rounded once to ``dtype``. Uses :func:`random_blocks` blocks."""
        raise NotImplementedError

    # -- convolution and pooling kernels ---------------------------------------------------------

    @staticmethod
    def im2col(x, kernel_size, stride, padding, dilation):
        """Receptive fields of x (N, C, H, W) as columns (C·kh·kw, N·OH·OW); geometry arguments
        are pairs of ints. ``ValueError`` when the output would be empty."""
        raise NotImplementedError

    @staticmethod
    def col2im(cols, x_shape, kernel_size, stride, padding, dilation):
        """im2col's adjoint: each column entry added back onto the input pixel it came from."""
        raise NotImplementedError

    @staticmethod
    def max_pool2d_forward(x, kernel_size, stride, padding, dilation, ceil_mode):
        """``(out, argmax)``: window maxima of x (N, C, H, W) and, as int64, the flat position
        (within its H·W plane) of each winner, for the backward pass."""
        raise NotImplementedError

    @staticmethod
    def max_pool2d_backward(grad_out, argmax, x_shape):
        """Each output gradient added to its window's winner; zeros elsewhere."""
        raise NotImplementedError

    @staticmethod
    def avg_pool2d_forward(x, kernel_size, stride, padding, ceil_mode, count_include_pad):
        """Window means (PyTorch's divisor rules for padding and ceil_mode)."""
        raise NotImplementedError

    @staticmethod
    def avg_pool2d_backward(grad_out, x_shape, kernel_size, stride, padding, ceil_mode,
                            count_include_pad):
        """Each output gradient spread evenly over its window (same divisors as forward)."""
        raise NotImplementedError

    # -- neural-network kernels ------------------------------------------------------------------

    @staticmethod
    def softmax(x, axis):
        """exp(x) / Σ exp(x) along the int ``axis``, stable for large x."""
        raise NotImplementedError

    @staticmethod
    def softmax_backward(grad, out, axis):
        """dL/dx of ``out = softmax(x, axis)`` from dL/dout: out ⊙ (grad - Σ_axis grad ⊙ out)."""
        raise NotImplementedError

    @staticmethod
    def log_softmax(x, axis):
        """x - logsumexp(x) along ``axis``, stable for large x."""
        raise NotImplementedError

    @staticmethod
    def softmax_cross_entropy_forward(logits, targets, ignore_index, label_smoothing,
                                      reduction="none"):
        """``(losses, log_probs)``: per-row cross-entropy of logits (N, C) against int64 class
        targets (N,), 0 on rows whose target is ``ignore_index``; with ``reduction`` "sum" or
        "mean" ``losses`` is 0-d: their sum, or their mean over the rows not ignored (nan when
        all are, as PyTorch). ``ValueError`` naming the first other target outside [0, C) (or an
        unknown reduction); a device backend may raise the target's at its next synchronisation
        instead (CUDA does: reading the check back at once would stall every step)."""
        raise NotImplementedError

    @staticmethod
    def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index,
                                       label_smoothing, reduction="none"):
        """d losses / d logits scaled by ``grad_losses``: softmax - target distribution.
        ``grad_losses`` is (N,) for ``reduction`` "none", else 0-d, the gradient of the sum or
        of the mean (divided by the count of rows not ignored, at least 1)."""
        raise NotImplementedError

    @staticmethod
    def gelu_forward(x, approximate):
        """GELU, exact (``"none"``) or the tanh approximation (``"tanh"``)."""
        raise NotImplementedError

    @staticmethod
    def gelu_backward(grad, x, approximate):
        """grad · GELU'(x)."""
        raise NotImplementedError

    @staticmethod
    def layer_norm_forward(x, weight, bias, eps):
        """``(y, mean, rstd)`` for rows of x (M, D); weight and bias (D,) or None."""
        raise NotImplementedError

    @staticmethod
    def layer_norm_backward(grad, x, mean, rstd, weight):
        """``(dx, dweight, dbias)``; the last two None without a weight."""
        raise NotImplementedError

    @staticmethod
    def batch_norm_forward(x, weight, bias, mean, var, eps):
        """``(y, mean, var, rstd)`` for batch norm of x (N, C, S) over axes 0 and 2, per channel.

        With ``mean`` and ``var`` None the batch's own statistics are used (training: the mean
        and the biased variance over the N·S values of each channel); otherwise the given (C,)
        statistics (evaluation). y = (x - mean)·rstd·weight + bias with rstd = 1/sqrt(var + eps);
        weight and bias (C,) or None. The returned statistics are (C,) in x's dtype.
        """
        raise NotImplementedError

    @staticmethod
    def batch_norm_backward(grad, x, mean, rstd, weight, batch_stats):
        """``(dx, dweight, dbias)`` of batch norm of x (N, C, S); the last two None without a
        weight. ``batch_stats``: whether the forward used the batch's statistics, which then
        depend on x and add the terms that remove the mean and the x̂ component of the gradient."""
        raise NotImplementedError

    @staticmethod
    def running_average_(running, batch, momentum, batch_scale):
        """In place: running ← (1 − momentum)·running + momentum·(batch·batch_scale), batch norm's
        running statistics. Rounded as composed: batch·batch_scale in batch's dtype (skipped
        when batch_scale is 1), cast to running's dtype, then each product and the sum in
        running's dtype (no fused multiply-add), so every backend gives the same bits."""
        raise NotImplementedError

    # -- recurrent cells -------------------------------------------------------------------------

    @staticmethod
    def lstm_cell_forward(gates, c_prev):
        """One LSTM step from the gate pre-activations ``gates`` (N, 4H), in PyTorch's order
        [input, forget, cell, output], and the previous cell state ``c_prev`` (N, H).

        With i, f, o = σ(…) and g = tanh(…): c = f·c_prev + i·g and h = o·tanh(c). Returns
        ``(h, c, activated)``; ``activated`` (N, 4H) holds i, f, g, o for the backward step.
        """
        raise NotImplementedError

    @staticmethod
    def lstm_cell_backward(grad_h, grad_c, c_prev, c, activated):
        """Gradients of one LSTM step: ``(grad_gates (N, 4H), grad_c_prev (N, H))`` from the
        gradients reaching h and c, and what ``lstm_cell_forward`` returned."""
        raise NotImplementedError

    @staticmethod
    def gru_cell_forward(input_gates, hidden_gates, h_prev):
        """One GRU step from ``input_gates`` = x·W_ihᵀ + b_ih and ``hidden_gates`` =
        h_prev·W_hhᵀ + b_hh (both (N, 3H), PyTorch's order [reset, update, new]).

        r, z = σ(…), n = tanh(x_n + r·h_n), h = (1 - z)·n + z·h_prev. Returns
        ``(h, activated)``; ``activated`` (N, 3H) holds r, z, n for the backward step.
        """
        raise NotImplementedError

    @staticmethod
    def gru_cell_backward(grad_h, hidden_gates, h_prev, activated):
        """Gradients of one GRU step: ``(grad_input_gates, grad_hidden_gates, grad_h_prev)``,
        the last being only the direct path through z·h_prev (the path through the hidden gates
        is the caller's product with W_hh)."""
        raise NotImplementedError

    # -- optimizer kernels (in place: they update the parameter and state arrays) ----------------

    @staticmethod
    def sgd_update(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
                   maximize, first_step):
        """One SGD step in place (formula and rounding order: the reference's docstring).
        ``param`` and the buffer must own contiguous writable memory (``ValueError`` otherwise)."""
        raise NotImplementedError

    @staticmethod
    def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2,
                    eps, weight_decay, decoupled_weight_decay, amsgrad, maximize):
        """One Adam/AdamW step in place (formula and rounding order: the reference's docstring)."""
        raise NotImplementedError

    @staticmethod
    def sgd_update_group(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay,
                         nesterov, maximize, first_step):
        """:meth:`sgd_update` of every ``params[i]`` with ``grads[i]`` and ``momentum_buffers[i]``
        (sequences of equal length; the buffers may be None without momentum), results equal
        bit for bit to those one-tensor calls. A device backend does it in few launches (a
        multi-tensor kernel) instead of one per tensor."""
        raise NotImplementedError

    @staticmethod
    def adam_update_group(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1,
                          beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, maximize):
        """:meth:`adam_update` of every ``params[i]`` with its gradient and state arrays (equal
        length sequences; ``max_exp_avg_sqs`` entries None without amsgrad), all at the same
        ``step``; equal bit for bit to the one-tensor calls, in few launches on a device."""
        raise NotImplementedError

    # -- compiled inference: steps that own their buffers (see PlanStep) ---------------------------

    @staticmethod
    def plan_conv2d(x_shape, weight, bias, stride, padding, dilation):
        """A :class:`PlanStep` for a convolution of one group of x (``x_shape``: N, C, H, W) by
        the constant ``weight`` (O, C, kh, kw) plus the constant ``bias`` (O,) or None, with
        pairs of ints for the geometry; the result is (N, O, OH, OW) of weight's dtype. The
        weights are read when the step is prepared: later changes to them do not reach it."""
        raise NotImplementedError

    @staticmethod
    def plan_max_pool2d(x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
        """A :class:`PlanStep` for the window maxima of :meth:`max_pool2d_forward` (without the
        argmax, which only a backward pass reads) of x (``x_shape``, ``dtype``)."""
        raise NotImplementedError

    @staticmethod
    def plan_linear(x_shape, weight, bias):
        """A :class:`PlanStep` for x @ weightᵀ + bias with x of ``x_shape`` (N, in), the
        constant ``weight`` (out, in) and the constant ``bias`` (out,) or None; the result is
        (N, out). The weights are read when the step is prepared."""
        raise NotImplementedError


def _primitive_names() -> tuple:
    # Every public staticmethod of the contract, in the order written above.
    return tuple(name for name, value in vars(Backend).items()
                 if isinstance(value, staticmethod))


ALL_PRIMITIVES = _primitive_names()
"""The names of every primitive, in the contract's order."""


MATH_FUNCTIONS = ("exp", "log", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                  "cosh", "tanh", "asinh", "acosh", "atanh", "erf")
"""The names :meth:`Backend.math_function` takes (Python's ``math`` module spells them so)."""


def check_math_function(name) -> None:
    """Refuse a ``math_function`` name outside :data:`MATH_FUNCTIONS`, the same way on every
    backend."""
    if name not in MATH_FUNCTIONS:
        raise ValueError(f"math_function: name must be one of {', '.join(MATH_FUNCTIONS)}, "
                         f"got {name!r}")


def signature(name: str) -> inspect.Signature:
    """The contract's signature of primitive ``name``."""
    return inspect.signature(getattr(Backend, name))


def random_blocks(count: int, dtype, distribution: str) -> int:
    """How many Philox blocks (four 32-bit words each) a draw of ``count`` samples consumes.

    Host arithmetic shared by every backend and by :class:`minidl.Generator`, which advances its
    counter by this much after each draw: U[0, 1) takes one word per float16/float32 sample and
    two per float64 sample; N(0, 1) takes four words (two 53-bit uniforms) per sample.
    """
    import numpy as np
    if distribution == "normal":
        words = 4 * count
    elif distribution == "uniform":
        words = count * (2 if np.dtype(dtype).itemsize == 8 else 1)
    else:
        raise ValueError(f"random_blocks: unknown distribution {distribution!r}")
    return -(-words // 4)
