"""The Hydra configuration tree and the model/system presets, installed as the package `dse.conf`."""
