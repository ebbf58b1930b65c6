"""Vectorised exhaustive search: models compiled to array kernels over packed states.

``bfs-vec`` runs the kernels with numpy on one CPU core, ``bfs-gpu`` with torch on a GPU (or, with
``device="cpu"``, on the CPU, which lets CI test the torch kernels). The interpreted ``bfs``
engine stays the reference: same ``CheckResult``, same counts, counterexamples rebuilt through
``evaluate``. ``lockstep.checkers.vector.distributed`` partitions the same search across processes.
"""

from lockstep.checkers.vector.search import VectorSearch, vectorisable
from lockstep.checkers.vector.values import Unsupported

__all__ = ["Unsupported", "VectorSearch", "vectorisable"]
