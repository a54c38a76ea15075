"""Traffic of one training iteration: bytes by type and link class, and GPU-pair traffic matrices.

    import dse.traffic as tr
    frame = tr.traffic_many(table, model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d",
                            network="rail_only")               # GB per GPU per iteration, per row
    pt = tr.pair_matrix(model="gpt3_175b", system="b200", nvs_size=8, strategy="tp1d",
                        network="rail_only", n1=8, n_p=4, n_d=4, microbatch=1, nvs1=8, nvs_p=1, nvs_d=1)
    pt.matrices["TP"]                                          # (n, n) GB sent src -> dst
    tr.write_parquet(pt, "out/traffic.parquet"); tr.plot(pt, "out/traffic.png")

The per-GPU numbers are `kernels.traffic` (its docstring has every formula). Modules:

    per_gpu    bytes per GPU by type and link class for a candidate table (`traffic_many`)
    placement  the search's placement of a configuration's GPUs on HB domains and rails
    pairs      the GPU-pair matrices of one configuration (`pair_matrix`), checked against per_gpu
    output     the pair matrices as Parquet and as heat maps
"""

from dse.traffic.output import pair_frame, plot, write_parquet
from dse.traffic.pairs import CHECK_RTOL, MAX_PAIR_GPUS, PairTraffic, check_rows, forwarded, pair_matrix, template
from dse.traffic.per_gpu import LINK_NAMES, TYPE_NAMES, one_table, summary_rows, traffic_many, traffic_one
from dse.traffic.placement import Placement, placement

__all__ = [
    "CHECK_RTOL",
    "LINK_NAMES",
    "MAX_PAIR_GPUS",
    "PairTraffic",
    "Placement",
    "TYPE_NAMES",
    "check_rows",
    "forwarded",
    "one_table",
    "pair_frame",
    "pair_matrix",
    "placement",
    "plot",
    "summary_rows",
    "template",
    "traffic_many",
    "traffic_one",
    "write_parquet",
]
