"""dse: a vectorized design-space explorer for training large transformers on GPU clusters.

    import dse
    dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl",
                 n1=4, n_p=128, n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
"""

import os as _os

from dse import _xla

_xla.configure()  # before JAX starts its CPU backend

from dse.api import evaluate, evaluate_many  # noqa: E402
from dse.search import SearchResult, run_search, search  # noqa: E402
from dse.specs import ModelSpec, SpecError, SystemSpec, load_model, load_system  # noqa: E402

__version__ = "0.1.0"

if _os.environ.get("DSE_COMPILE_CACHE", "1") not in ("", "0"):
    from dse.engine import enable_compile_cache as _cache

    _cache()  # JAX's persistent compilation cache: a second process does not recompile

__all__ = [
    "ModelSpec",
    "SpecError",
    "SystemSpec",
    "evaluate",
    "evaluate_many",
    "load_model",
    "load_system",
    "run_search",
    "search",
    "SearchResult",
    "__version__",
]
