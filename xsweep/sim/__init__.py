"""xsweep."""
