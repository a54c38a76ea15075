"""The subcommands of `dse` (`dse.cli.SUBCOMMANDS`), each a module with `main(argv=None) -> int`.

Config fields are Hydra overrides in every one of them (`dse.interface.overrides`); flags are for files and
output formats, and for the parameters of a paper's own check (`dse validate nic --peak ...`).
"""
