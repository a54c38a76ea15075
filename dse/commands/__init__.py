"""Stand-alone commands of the project, each a module with `main(argv=None) -> int`, run as `python -m dse.commands.<name>`."""
