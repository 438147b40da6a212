"""`invoke bench`: measure a deployed stack through its gateway, compare runs, and explain them against
the memory-bandwidth roofline. Each module's docstring says its part."""
