"""ONNX ``Einsum`` as broadcasting products and sums of minidl ops.

``"bij,bjk->bik"`` names every axis with a letter. Each operand is brought to one common axis
order — the output's letters first, then the letters summed away — with a length-1 axis for each
letter it lacks; the operands' broadcast product is then summed over the non-output letters.
A letter repeated within one operand (``"ii->i"``) first takes that operand's diagonal, and
``...`` stands for the same broadcast axes in every operand. Everything is ``getitem``,
``permute``, ``reshape``, ``mul`` and ``sum``, so gradients flow to every operand.
"""

from __future__ import annotations

import numpy as np

from ..ops import elementwise as ew, reduction, shape
from .registry import host_result, onnx_op


def _parse(equation: str, ranks):
    """(letters of each operand, letters of the output), "..." spelled out as its own letters."""
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum: equation {equation!r} has {len(terms)} operands, "
                         f"got {len(ranks)}")
    broadcast_rank = max((rank - len(term.replace("...", "")) for term, rank in
                          zip(terms, ranks) if "..." in term), default=0)
    # Characters no equation uses stand for the ellipsis axes, aligned on the right.
    ellipsis = [chr(0x2460 + i) for i in range(broadcast_rank)]
    spelled = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            count = rank - len(term.replace("...", ""))
            term = term.replace("...", "".join(ellipsis[broadcast_rank - count:]))
        if len(term) != rank:
            raise ValueError(f"Einsum: term {term!r} for an operand of rank {rank}")
        spelled.append(term)
    if arrow:
        output = right.replace("...", "".join(ellipsis))
    else:  # implicit output: the ellipsis axes, then each letter used once, alphabetically
        letters = "".join(spelled)
        output = "".join(ellipsis) + "".join(sorted(c for c in set(letters)
                                                    if letters.count(c) == 1 and c.isalpha()))
    return spelled, output


def _diagonal(x, term: str):
    """Take the diagonal for every letter repeated in ``term``; returns (tensor, term)."""
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first, second = term.index(letter), term.index(letter, term.index(letter) + 1)
        order = [i for i in range(x.ndim) if i not in (first, second)] + [first, second]
        moved = shape.permute(x, tuple(order))
        along = np.arange(x.shape[first])
        x = shape.getitem(moved, (Ellipsis, along, along))
        term = "".join(term[i] for i in order[:-2]) + letter
    return x, term


@onnx_op("Einsum")
def _einsum(inputs, attributes, context):
    equation = attributes["equation"]
    if any(t.dtype.kind != "f" for t in inputs):
        arrays = [t.numpy() for t in inputs]
        return host_result(np.einsum(equation, *arrays), inputs[0])
    terms, output = _parse(equation, [t.ndim for t in inputs])
    operands = []
    for x, term in zip(inputs, terms):
        x, term = _diagonal(x, term)
        operands.append((x, term))
    summed = sorted({c for _, term in operands for c in term} - set(output))
    order = output + "".join(summed)
    product = None
    for x, term in operands:
        present = [c for c in order if c in term]
        x = shape.permute(x, tuple(term.index(c) for c in present))
        sizes = dict(zip(present, x.shape))
        x = shape.reshape(x, tuple(sizes.get(c, 1) for c in order))
        product = x if product is None else ew.mul(product, x)
    if summed:
        product = reduction.sum(product, axis=tuple(range(len(output), len(order))))
    return product
