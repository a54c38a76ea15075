"""Decisions: sensitivities, hardware co-design and failure what-ifs over a configuration."""
