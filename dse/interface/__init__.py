"""Interface: the override grammar, the Hydra application and the console tables."""
