"""Space and search: the candidate enumeration, the compiled programs, the streaming search and its top-k."""
