"""Results: Parquet datasets, Polars queries, Pareto fronts, cost columns and the study's figures."""
