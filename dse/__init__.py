"""dse: a vectorized design-space explorer for training large transformers on GPU clusters.

    import dse
    dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl",
                 n1=4, n_p=128, n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)
"""

import os as _os

# One XLA host device per core, so that the search engine can split each chunk over the cores.
# Takes effect if set before JAX starts its CPU backend; DSE_CPU_DEVICES overrides the count.
if "xla_force_host_platform_device_count" not in _os.environ.get("XLA_FLAGS", ""):
    try:
        _cores = len(_os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        _cores = _os.cpu_count() or 1
    _cores = int(_os.environ.get("DSE_CPU_DEVICES", _cores))
    _os.environ["XLA_FLAGS"] = (
        _os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={_cores}"
    ).strip()

from dse.api import evaluate, evaluate_many  # noqa: E402
from dse.search import SearchResult, run_search, search  # noqa: E402
from dse.specs import ModelSpec, SpecError, SystemSpec, load_model, load_system  # noqa: E402

__version__ = "0.1.0"

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
