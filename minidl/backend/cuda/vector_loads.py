"""Four neighbouring elements in one load instruction (``ld.global.v4.f32``, ``ld.shared.v4.f32``).

A GPU moves memory in 16-byte vectors as cheaply as in 4-byte words: one vector load asks the
memory system once for what four scalar loads ask it four times, and issues a quarter of the
instructions. The compiler merges neighbouring loads into a vector only when it can prove the
first address 16-byte aligned, which it cannot for an array handed to a kernel. :func:`load4`
states it: it loads ``array[index : index + 4]`` as one LLVM vector load with 16-byte alignment,
and the caller promises that the address is a multiple of 16 bytes (float64 becomes two
``v2.f64`` loads). On numba's simulator, where there is no compiler, it is four plain reads.
"""

from __future__ import annotations

from numba import cuda

from .device import SIMULATED

if SIMULATED:
    @cuda.jit(device=True)
    def load4(array, index):
        """``array[index : index + 4]`` as a tuple (the simulator's plain reads)."""
        return array[index], array[index + 1], array[index + 2], array[index + 3]
else:
    from llvmlite import ir
    from numba.cuda import cgutils, types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load4(typingctx, array, index):
        """``array[index : index + 4]`` as a tuple, from one 16-byte-aligned vector load."""
        signature = types.UniTuple(array.dtype, 4)(array, index)

        def codegen(context, builder, signature, args):
            array_type, index_type = signature.args
            view = context.make_array(array_type)(context, builder, args[0])
            position = context.cast(builder, args[1], index_type, types.intp)
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [position])
            vector = ir.VectorType(context.get_data_type(array_type.dtype), 4)
            loaded = builder.load(builder.bitcast(pointer, vector.as_pointer()), align=16)
            values = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), lane))
                      for lane in range(4)]
            return context.make_tuple(builder, signature.return_type, values)
        return signature, codegen


__all__ = ["load4"]
