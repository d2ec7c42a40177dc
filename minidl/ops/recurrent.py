"""Recurrent layers' ops: one direction of one layer of an RNN, LSTM or GRU over a whole
sequence, as a single graph node.

Per time step the work is two matrix products and the cell's gate arithmetic. The input's share
of the gates, x_t·W_ihᵀ + b, does not depend on the previous state, so it is computed for all T
steps in one large product before the loop; inside the loop each step is one product with W_hh
and one fused cell primitive (``lstm_cell_forward``, ``gru_cell_forward``). Backpropagation
through time runs the loop in reverse with the fused cell gradients, collecting every step's
gate gradient; the weight gradients are then again single large products over all steps:
dW_ih = dGᵀ·X and dW_hh = dGᵀ·H_prev. A "reverse" direction (the second half of a
bidirectional layer) walks t = T-1 … 0 and writes each output at its own position t.

Sequences are (T, N, features). The LSTM op returns its outputs with the final cell state
appended as row T (a node has one output); the layer splits them.
"""

from __future__ import annotations

from ..autograd.function import Function, ReadsInputsWhenRecorded
from ..backend import composed


def _input_gates(be, x, w_ih, b_ih, b_hh):
    """x·W_ihᵀ (+ both biases: they add up before any nonlinearity) for all steps, (T, N, G).

    The two (G,) biases are summed first, so the (T·N, G) gates take one pass instead of two;
    this rounds x·W_ihᵀ + (b_ih + b_hh) rather than (x·W_ihᵀ + b_ih) + b_hh, at most one
    rounding apart per entry."""
    steps, batch, features = x.shape
    gates = be.matmul(be.reshape(x, (steps * batch, features)), w_ih, transpose_b=True)
    biases = [bias for bias in (b_ih, b_hh) if bias is not None]
    if biases:
        gates = be.add(gates, biases[0] if len(biases) == 1 else be.add(*biases))
    return be.reshape(gates, (steps, batch, -1))


def _rows(be, steps_array):
    """A (T, N, F) array as the (T·N, F) rows that one product over all steps takes."""
    steps, batch, width = steps_array.shape
    return be.reshape(steps_array, (steps * batch, width))


def _input_grads(be, gate_grads, inputs, w):
    """(dInputs, dW, db) of inputs·Wᵀ + b from the gradient of its result, each one product
    (or sum) over all T steps: dInputs = dG·W, dW = Σ_t dG_tᵀ·inputs_t = dGᵀ·inputs with the
    steps stacked as rows, db = Σ_rows dG."""
    flat = _rows(be, gate_grads)
    grad_inputs = be.reshape(be.matmul(flat, w), inputs.shape)
    return grad_inputs, _weight_grad(be, gate_grads, inputs), be.sum(flat, axis=0)


def _weight_grad(be, gate_grads, inputs):
    """dW = Σ_t dG_tᵀ·inputs_t of inputs·Wᵀ, as one (G × T·N)·(T·N × F) product. For the
    recurrent weights (inputs = the previous states) this is all the backward pass needs after
    its loop: the gradient reaching each h_{t-1} was already taken step by step."""
    return be.matmul(_rows(be, gate_grads), _rows(be, inputs), transpose_a=True)


def _order(steps: int, reverse: bool):
    return range(steps - 1, -1, -1) if reverse else range(steps)


class _RecurrenceFunction(ReadsInputsWhenRecorded, Function):
    """What the three cells share: inputs (x, h0[, c0], w_ih, w_hh[, b_ih, b_hh]) and the
    bias and gradient bookkeeping."""

    state_count = 1  # h0, or h0 and c0

    def _split(self, arrays):
        x, states = arrays[0], arrays[1:1 + self.state_count]
        w_ih, w_hh, *biases = arrays[1 + self.state_count:]
        b_ih, b_hh = biases if biases else (None, None)
        return x, states, w_ih, w_hh, b_ih, b_hh

    def _grads(self, grad_x, grad_states, dw_ih, dw_hh, db_ih, db_hh):
        grads = (grad_x, *grad_states, dw_ih, dw_hh)
        return grads + ((db_ih, db_hh) if self.has_bias else ())

    def composed(self, *inputs):
        """The same recurrence unrolled into differentiable ops, step by step (for gradients
        of gradients: the fused cell kernels have first derivatives only)."""
        from .linalg import matmul
        from .shape import stack
        x, states, w_ih, w_hh, b_ih, b_hh = self._split(inputs)
        input_gates = matmul(x, w_ih.T)
        if b_ih is not None:
            input_gates = input_gates + b_ih
        outputs, states = [None] * x.shape[0], list(states)
        for t in _order(x.shape[0], self.reverse):
            hidden_gates = matmul(states[0], w_hh.T)
            if b_hh is not None:
                hidden_gates = hidden_gates + b_hh
            states = self._cell(input_gates[t], hidden_gates, states)
            outputs[t] = states[0]
        return stack(outputs + states[1:], 0)


class LSTMRecurrenceFunction(_RecurrenceFunction):
    state_count = 2

    def forward(self, *arrays, reverse):
        be = self.backend
        x, (h, c), w_ih, w_hh, b_ih, b_hh = self._split(arrays)
        self.has_bias, self.reverse = b_ih is not None, reverse
        self.x, self.w_ih, self.w_hh = x, w_ih, w_hh
        gates = _input_gates(be, x, w_ih, b_ih, b_hh)
        w_hh_t = be.copy(be.transpose(w_hh, (1, 0)))  # contiguous: T small products use it
        steps = x.shape[0]
        outputs, self.saved = [None] * steps, [None] * steps
        for t in _order(steps, reverse):
            step_gates = be.add(be.getitem(gates, (t,)), be.matmul(h, w_hh_t))
            h_prev, c_prev = h, c
            h, c, activated = be.lstm_cell_forward(step_gates, c_prev)
            self.saved[t] = (h_prev, c_prev, c, activated)
            outputs[t] = h
        return composed.stack(be, outputs + [c], 0)

    def backward(self, grad):
        be = self.backend
        steps = len(self.saved)
        # shaped like an output h (N, H), which is c's shape: the h fed in may be narrower
        # (an LSTM with a projection runs this op one step at a time on projected states)
        grad_h = composed.zeros_like(be, self.saved[0][2])
        grad_c = be.getitem(grad, (steps,))
        gate_grads = [None] * steps
        for t in _order(steps, not self.reverse):
            h_prev, c_prev, c, activated = self.saved[t]
            dh = be.add(be.getitem(grad, (t,)), grad_h)
            gate_grads[t], grad_c = be.lstm_cell_backward(dh, grad_c, c_prev, c, activated)
            grad_h = be.matmul(gate_grads[t], self.w_hh)
        gate_grads = composed.stack(be, gate_grads, 0)
        previous = composed.stack(be, [saved[0] for saved in self.saved], 0)
        # b_ih and b_hh enter the gates as one sum, so both get the same gradient.
        grad_x, dw_ih, db = _input_grads(be, gate_grads, self.x, self.w_ih)
        dw_hh = _weight_grad(be, gate_grads, previous)
        return self._grads(grad_x, (grad_h, grad_c), dw_ih, dw_hh, db, db)

    @staticmethod
    def _cell(input_gates, hidden_gates, states):
        from .elementwise import sigmoid, tanh
        h, c = states
        gates = input_gates + hidden_gates
        size = h.shape[1]
        i, f, g, o = (gates[:, k * size:(k + 1) * size] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * tanh(g)
        return [sigmoid(o) * tanh(c), c]


class GRURecurrenceFunction(_RecurrenceFunction):
    def forward(self, *arrays, reverse):
        be = self.backend
        x, (h,), w_ih, w_hh, b_ih, b_hh = self._split(arrays)
        self.has_bias, self.reverse = b_ih is not None, reverse
        self.x, self.w_ih, self.w_hh = x, w_ih, w_hh
        # Unlike the LSTM, b_hh stays inside: the new-gate candidate multiplies it by r.
        input_gates = _input_gates(be, x, w_ih, b_ih, None)
        w_hh_t = be.copy(be.transpose(w_hh, (1, 0)))  # contiguous: T small products use it
        steps = x.shape[0]
        outputs, self.saved = [None] * steps, [None] * steps
        for t in _order(steps, reverse):
            hidden_gates = be.matmul(h, w_hh_t)
            if b_hh is not None:
                hidden_gates = be.add(hidden_gates, b_hh)
            h_prev = h
            h, activated = be.gru_cell_forward(be.getitem(input_gates, (t,)), hidden_gates, h_prev)
            self.saved[t] = (h_prev, hidden_gates, activated)
            outputs[t] = h
        return composed.stack(be, outputs, 0)

    def backward(self, grad):
        be = self.backend
        steps = len(self.saved)
        grad_h = composed.zeros_like(be, self.saved[0][0])
        input_grads, hidden_grads = [None] * steps, [None] * steps
        for t in _order(steps, not self.reverse):
            h_prev, hidden_gates, activated = self.saved[t]
            dh = be.add(be.getitem(grad, (t,)), grad_h)
            input_grads[t], hidden_grads[t], direct = be.gru_cell_backward(
                dh, hidden_gates, h_prev, activated)
            grad_h = be.add(direct, be.matmul(hidden_grads[t], self.w_hh))
        previous = composed.stack(be, [saved[0] for saved in self.saved], 0)
        grad_x, dw_ih, db_ih = _input_grads(be, composed.stack(be, input_grads, 0), self.x,
                                            self.w_ih)
        hidden_grads = composed.stack(be, hidden_grads, 0)
        dw_hh = _weight_grad(be, hidden_grads, previous)
        db_hh = be.sum(_rows(be, hidden_grads), axis=0)
        return self._grads(grad_x, (grad_h,), dw_ih, dw_hh, db_ih, db_hh)

    @staticmethod
    def _cell(input_gates, hidden_gates, states):
        from .elementwise import sigmoid, tanh
        (h,) = states
        size = h.shape[1]
        xr, xz, xn = (input_gates[:, k * size:(k + 1) * size] for k in range(3))
        hr, hz, hn = (hidden_gates[:, k * size:(k + 1) * size] for k in range(3))
        r, z = sigmoid(xr + hr), sigmoid(xz + hz)
        n = tanh(xn + r * hn)
        return [(1 - z) * n + z * h]


class RNNRecurrenceFunction(_RecurrenceFunction):
    # h_t = act(x_t·W_ihᵀ + b_ih + h_{t-1}·W_hhᵀ + b_hh), act = tanh or relu: the cell is one
    # elementwise primitive, so it needs no fused kernel of its own.
    def forward(self, *arrays, reverse, nonlinearity):
        be = self.backend
        x, (h,), w_ih, w_hh, b_ih, b_hh = self._split(arrays)
        self.has_bias, self.reverse, self.nonlinearity = b_ih is not None, reverse, nonlinearity
        self.x, self.w_ih, self.w_hh = x, w_ih, w_hh
        gates = _input_gates(be, x, w_ih, b_ih, b_hh)
        w_hh_t = be.copy(be.transpose(w_hh, (1, 0)))  # contiguous: T small products use it
        activate = (lambda z: be.math_function(z, "tanh")) if nonlinearity == "tanh" \
            else be.relu
        steps = x.shape[0]
        outputs, self.previous = [None] * steps, [None] * steps
        for t in _order(steps, reverse):
            self.previous[t] = h
            h = activate(be.add(be.getitem(gates, (t,)), be.matmul(h, w_hh_t)))
            outputs[t] = h
        self.outputs = outputs
        return composed.stack(be, outputs, 0)

    def backward(self, grad):
        be = self.backend
        steps = len(self.outputs)
        grad_h = composed.zeros_like(be, self.outputs[0])
        pre_grads = [None] * steps
        for t in _order(steps, not self.reverse):
            dh = be.add(be.getitem(grad, (t,)), grad_h)
            h = self.outputs[t]
            pre_grads[t] = be.mul(dh, be.sub(1.0, be.mul(h, h))) if self.nonlinearity == "tanh" \
                else be.relu_backward(dh, h)  # relu(a) > 0 exactly where a > 0
            grad_h = be.matmul(pre_grads[t], self.w_hh)
        pre_grads = composed.stack(be, pre_grads, 0)
        grad_x, dw_ih, db = _input_grads(be, pre_grads, self.x, self.w_ih)
        dw_hh = _weight_grad(be, pre_grads, composed.stack(be, self.previous, 0))
        return self._grads(grad_x, (grad_h,), dw_ih, dw_hh, db, db)

    def _cell(self, input_gates, hidden_gates, states):
        from .elementwise import relu, tanh
        return [(tanh if self.nonlinearity == "tanh" else relu)(input_gates + hidden_gates)]


def recurrence(mode: str, x, states, w_ih, w_hh, b_ih=None, b_hh=None, *, reverse=False,
               nonlinearity="tanh"):
    """One direction of one recurrent layer over x (T, N, I); ``states`` is (h0,) or
    (h0, c0) for the LSTM. Returns (T, N, H) outputs ((T + 1, N, H) for the LSTM: the final cell
    state appended)."""
    inputs = (x, *states, w_ih, w_hh) + ((b_ih, b_hh) if b_ih is not None else ())
    if mode == "LSTM":
        return LSTMRecurrenceFunction.apply(*inputs, reverse=reverse)
    if mode == "GRU":
        return GRURecurrenceFunction.apply(*inputs, reverse=reverse)
    return RNNRecurrenceFunction.apply(*inputs, reverse=reverse, nonlinearity=nonlinearity)
