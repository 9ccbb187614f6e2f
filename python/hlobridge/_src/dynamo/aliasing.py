"""Which mutated graph inputs a stitched program updates in place.

AOTAutograd functionalizes an in-place update of a graph input (a static
KV cache's ``index_copy_``) into an extra graph output holding the input's
new value (:meth:`~hlobridge._src.dynamo.program.CompiledGraph.alias_mutated_inputs`).
:func:`program_aliases` turns those ``(graph output, graph input)`` pairs
into the stitcher's ``(program input, program result)`` pairs, which
:func:`hlobridge._native.stitch` writes as ``tf.aliasing_output`` on
``@main``'s arguments (and checks again: a bad pair is a ``StitchError``).
A mutation that does not fit is left out, to AOTAutograd's copy.
"""

from __future__ import annotations

from hlobridge._src.dynamo.engine import TensorSpec

__all__ = ["program_aliases"]


def program_aliases(mutations: list[tuple[int, int]], placeholders: list[str],
                    types: dict[str, TensorSpec], used_args: list[int],
                    outputs: list[tuple[str, int] | None], results: list[str]
                    ) -> list[tuple[int, int]]:
    """The ``(program input k, program result j)`` pairs for ``mutations``
    (``(graph output, graph input)``): each mutated input the program reads
    (``used_args``: graph input of each program input) whose new value is a
    program result of its own type (``results``: each result's handle) that
    only that one graph output returns (``outputs``: ``("prog", j)``,
    ``("arg", i)`` or ``None`` per graph output). Each input and each result
    is aliased at most once."""
    aliases: list[tuple[int, int]] = []
    for o, i in mutations:
        if not (0 <= o < len(outputs) and 0 <= i < len(placeholders)) or i not in used_args:
            continue
        out = outputs[o]
        if out is None or out[0] != "prog" or outputs.count(out) != 1:
            continue
        k, j, name = used_args.index(i), out[1], placeholders[i]
        if types.get(name) is None or types.get(results[j]) != types[name]:
            continue
        if any(k == a or j == b for a, b in aliases):
            continue
        aliases.append((k, j))
    return aliases
