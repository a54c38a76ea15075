"""dse: a vectorized design-space explorer for training large transformers on GPU clusters.

    import dse
    dse.configure()   # optional: XLA flags, compilation cache, 64-bit mode (`dse.runtime`)
    dse.evaluate(model="gpt3_1t", system="b200", nvs_size=8, strategy="tp1d", profile="lbnl",
                 n1=4, n_p=128, n_d=8, microbatch=1, nvs1=4, nvs_p=2, nvs_d=1)

Importing the package has no process-wide effect; `configure` applies the settings the `dse`
command uses, and must come before the first JAX computation for its XLA flags to apply.
"""

from dse.api import evaluate, evaluate_many
from dse.decisions.codesign import codesign
from dse.results.economics import EconomicsSpec
from dse.results.pareto import pareto
from dse.runtime import configure
from dse.explore.search import SearchResult, run_search, search
from dse.decisions.sensitivity import sensitivity
from dse.spec.specs import ModelSpec, SpecError, SystemSpec, load_model, load_system
from dse.decisions.whatif import Scenario, expected_training_days, goodput, whatif

__version__ = "0.1.0"

__all__ = [
    "EconomicsSpec",
    "ModelSpec",
    "SpecError",
    "SystemSpec",
    "codesign",
    "configure",
    "evaluate",
    "evaluate_many",
    "expected_training_days",
    "goodput",
    "load_model",
    "load_system",
    "pareto",
    "run_search",
    "Scenario",
    "search",
    "SearchResult",
    "sensitivity",
    "whatif",
    "__version__",
]
