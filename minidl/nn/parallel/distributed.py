"""``DistributedDataParallel``: one model replica per process, gradients averaged during backward.

Data parallelism in three promises, kept here:

1. **Same start.** At wrap time every rank checks that its model has the same parameter and
   buffer names, shapes and dtypes as the others (a mismatch raises on every rank, naming the
   first difference) and then takes rank 0's values by broadcast.
2. **Same update.** Each rank runs forward and backward on its own slice of the global
   batch. When backward finishes, the gradients are averaged over the ranks, so every replica
   holds ``(1/N) * sum_r grad_r``. With a mean loss over equal local batches of B samples this
   is exactly the gradient of the mean loss over the global batch of N*B samples, so N ranks
   step like one process with the N-times larger batch (up to float rounding), and since every
   rank applies the same update to the same weights, the replicas stay identical.
3. **Fixed order.** Gradients travel in *buckets* of up to ``bucket_cap_mb`` megabytes, laid
   out from the model alone and reduced in a fixed order, each bucket's all-reduce started as
   soon as backward has produced its gradients (``overlap=True``) or all of them after
   backward (``overlap=False``); the averages are complete when ``backward()`` returns either
   way (:mod:`.buckets`).

**Uneven batches.** The last batch of an epoch rarely splits evenly: a reader gives some ranks
one sample more, and with fewer samples than ranks some none. Averaging the ranks' gradients
equally would then weight samples unequally, so each rank's gradient is weighted by its share
of a full batch, n_r / B, as its data-parallel reader recorded it
(:mod:`minidl.distributed.batch_samples`): the result is ``sum_r n_r g_r / sum_r n_r``, the mean
over the samples of the global batch, as one process computes it. This assumes the loss is
the mean over the rank's batch (the usual case); a rank with an empty batch contributes
nothing (its NaN mean is not read). Full batches all weigh 1.0, i.e. the plain average, bit
for bit. ``weight_by_samples=False`` restores the plain average (a loss that is a sum, or
batches that do not come from a minidl reader); without a reader's record every rank weighs
1.0 as well.

A parameter that got no gradient on some rank counts as zero there; one that got none on any
rank keeps ``grad = None`` (a presence flag per parameter travels at the end of its bucket,
followed by the rank's weight).

Buffers (BatchNorm's running statistics) are computed locally, as in PyTorch; with
``broadcast_buffers=True`` (PyTorch's default) rank 0's buffers are copied to every rank at the
start of each training forward, so all replicas -- and any checkpoint -- agree on them.

``no_sync()`` skips the averaging for forward/backward passes run inside it: gradients then
accumulate locally, and the first backward outside averages the accumulated sum.
"""

from __future__ import annotations

import contextlib
import weakref

import numpy as np

from ... import distributed as dist
from ...autograd import engine
from ...autograd.grad_mode import is_grad_enabled
from ...distributed.agreement import check_same_on_all_ranks
from ...distributed.batch_samples import latest_batch
from ..module import Module
from .buckets import GradientAverager, _buckets

DEFAULT_BUCKET_CAP_MB = 25.0


class DistributedDataParallel(Module):
    """Wrap ``module`` for data-parallel training over the process group (PyTorch's name).

    Call it as the module itself; its ``state_dict`` names start with ``module.`` as in
    PyTorch. ``bucket_cap_mb`` sets the gradient bucket size (0: one bucket per parameter).
    ``weight_by_samples`` (default True) weights each rank's gradient by the samples its
    reader gave it this step, so uneven last batches average like one process (see above).
    ``overlap`` (default True) starts each bucket's all-reduce during backward.
    Needs ``minidl.distributed.init_process_group()`` first when launched under mpiexec; in a
    group of one it is a transparent wrapper.
    """

    def __init__(self, module: Module, bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB,
                 broadcast_buffers: bool = True, weight_by_samples: bool = True,
                 overlap: bool = True):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a Module, got {type(module).__name__}")
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
                or bucket_cap_mb < 0:
            raise ValueError(f"bucket_cap_mb must be a non-negative number, got {bucket_cap_mb!r}")
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.weight_by_samples = bool(weight_by_samples)
        self.overlap = bool(overlap)
        self.world_size = dist.get_world_size()
        self._check_same_model()
        check_same_on_all_ranks("DistributedDataParallel", {
            "bucket_cap_mb": self.bucket_cap_mb, "broadcast_buffers": self.broadcast_buffers,
            "weight_by_samples": self.weight_by_samples, "overlap": self.overlap})
        self._broadcast_state(include_parameters=True)
        trainable = [p for p in module.parameters() if p.requires_grad]
        for param in trainable:
            if param.dtype.kind != "f" or param.dtype.itemsize < 4:
                raise TypeError(f"DistributedDataParallel: parameters must be float32 or float64 "
                                f"to be reduced, got {param.dtype}")
        self._buckets = _buckets(list(reversed(trainable)), self.bucket_cap_mb * (1 << 20))
        self._averager = GradientAverager(self._buckets)
        self._sync = True
        self._pending = False
        self._overlapping = False  # whether the backward under way starts buckets as it goes
        # The reader's batches taken since the last averaging: the newest one's serial, and
        # the samples they held against the samples of as many full batches.
        self._batch_serial = latest_batch()[0]
        self._samples = self._full_samples = 0
        this = weakref.ref(self)  # the hook must not keep a discarded model alive
        self._hook = engine.register_backward_finished_hook(
            lambda: this() is not None and this()._after_backward())
        self._ready_hook = None
        if self.overlap and self.world_size > 1:
            self._ready_hook = engine.register_gradient_ready_hook(
                lambda leaf: this() is not None and this()._gradient_ready(leaf))

    # -- wrap time -------------------------------------------------------------------------------

    def _check_same_model(self) -> None:
        layout = [[name, list(t.shape), t.dtype.str] for name, t in self.module._state_items()]
        layouts = dist.all_gather_object(layout)
        for rank, other in enumerate(layouts):
            if other == layout:
                continue
            mine, theirs = dict((n, (s, d)) for n, s, d in layout), dict((n, (s, d)) for n, s, d in other)
            names = [n for n in list(mine) + list(theirs) if mine.get(n) != theirs.get(n)]
            first = names[0] if names else "(order)"
            raise dist.DistributedError(
                f"DistributedDataParallel: the model on rank {dist.get_rank()} differs from the "
                f"one on rank {rank}: {first}: {mine.get(first)} here, {theirs.get(first)} there "
                f"({len(names)} entr{'y' if len(names) == 1 else 'ies'} differ)")

    def _broadcast_state(self, include_parameters: bool) -> None:
        """Give every rank rank 0's values, one flat broadcast per dtype (and per GPU: tensors
        on a GPU are broadcast there, :mod:`.device_buckets`)."""
        if self.world_size == 1:
            return
        tensors = [t for _, t in self.module._state_items()
                   if include_parameters or not t.requires_grad]
        on_gpu = [t for t in tensors if t.device != "cpu"]
        if on_gpu:
            from .device_buckets import broadcast_on_device
            left = {id(t) for t in broadcast_on_device(on_gpu)}
            tensors = [t for t in tensors if t.device == "cpu" or id(t) in left]
        by_dtype: dict = {}
        for tensor in tensors:
            by_dtype.setdefault(tensor.dtype.str, []).append(tensor)
        for group in by_dtype.values():
            flat = np.concatenate([np.ravel(t.numpy()) for t in group])
            dist.broadcast(flat, src=0)
            start = 0
            for tensor in group:
                values = tensor.numpy()
                values[...] = flat[start:start + values.size].reshape(values.shape)
                if tensor.device != "cpu":
                    tensor.data = tensor.backend.from_numpy(values)
                start += values.size

    # -- each step -------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self.training and is_grad_enabled():
            if self._overlapping:
                # Buckets were started, and the other ranks' matching all-reduces with them:
                # no later collective could be matched correctly.
                raise dist.DistributedError(
                    "DistributedDataParallel: the previous backward failed while its gradients "
                    "were being averaged; the ranks can no longer agree (restart the job)")
            if self.broadcast_buffers:
                self._broadcast_state(include_parameters=False)
            self._pending = self._sync
            self._take_batch_samples()
        return self.module(*args, **kwargs)

    def _take_batch_samples(self) -> None:
        """Count the batch the reader handed out last, once (micro-batches of one batch run
        several forwards)."""
        serial, samples, full_samples = latest_batch()
        if serial != self._batch_serial:
            self._batch_serial = serial
            self._samples += samples
            self._full_samples += full_samples

    def sample_weight(self) -> float:
        """This rank's weight in the next gradient averaging: the samples of the batches read
        since the last one over the samples of as many full batches (1.0 without a
        data-parallel reader's record, or with ``weight_by_samples=False``)."""
        if not self.weight_by_samples or self._full_samples == 0:
            return 1.0
        return self._samples / self._full_samples

    @contextlib.contextmanager
    def no_sync(self):
        """Accumulate gradients locally for the passes run inside; the next one outside syncs."""
        before = self._sync
        self._sync = False
        try:
            yield
        finally:
            self._sync = before

    def _gradient_ready(self, leaf) -> None:
        if not self._pending:
            return
        if not self._overlapping:  # the first gradient of this backward
            self._overlapping = True
            self._averager.begin(self._take_sample_weight())
        self._averager.gradient_ready(leaf)

    def _after_backward(self) -> None:
        if not self._pending:
            return
        self._pending = False
        if self._overlapping:
            self._overlapping = False
            self._averager.finish()
        else:
            self.reduce_gradients()

    def _take_sample_weight(self) -> float:
        weight = self.sample_weight()
        self._samples = self._full_samples = 0
        return weight

    def reduce_gradients(self) -> None:
        """Average every parameter's gradient over the ranks, bucket by bucket, in place.

        Called automatically after backward; call it by hand only after computing gradients
        some other way. Each rank's gradient weighs :meth:`sample_weight`.
        """
        weight = self._take_sample_weight()
        if self.world_size > 1:
            self._averager.average_now(weight)

    def extra_repr(self) -> str:
        return (f"world_size={self.world_size}, buckets={len(self._buckets)}, "
                f"bucket_cap_mb={self.bucket_cap_mb:g}")

    def __del__(self):
        for name in ("_hook", "_ready_hook"):
            hook = self.__dict__.get(name)
            if hook is not None:
                hook.remove()
