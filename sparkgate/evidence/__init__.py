"""Runtime evidence that optimizations engaged: sources (HTTP, log, calibration), check results and the
verdict. Per-optimization checks live with their optimization in sparkgate/optimizations/."""
