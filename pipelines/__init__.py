"""userdp job layer: configuration, planning, I/O, runners and the command line."""
