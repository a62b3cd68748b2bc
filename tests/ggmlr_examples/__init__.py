"""ggmlR 0.8.2's own example scripts (inst/examples/*.R), ported line by line.

Each file is one script, as it would be written against ggmlpy: R's spelling turned into Python's
(`x |> f(a)` is `x = f(x, a)`, `$` is `[...]` or `.`, 1-based indices become 0-based, R's random
draws come from numpy), nothing else changed, except where a comment says why (data ggmlR reads
from the author's disk, sizes shrunk so that a test takes seconds). The assertions at the end check
ggmlR's printed numbers where the run is deterministic, and otherwise what must hold: finite
losses that fall, shapes, accuracy above chance.
"""
