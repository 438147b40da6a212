"""`invoke bench`: measure a deployed stack through its gateway, compare runs, and explain them against
the memory-bandwidth roofline.

Modules:
  workloads  GSM8K-style 5-shot prompts from a local JSONL, a seeded synthetic set, a generated arithmetic set
  answers    answer extraction (`#### N`, `\\boxed{N}`, last number) and scoring
  harness    one request at a time through the gateway; per-request timing, usage tokens, accept length
  stats      the summary table's numbers, percentiles, the exact McNemar test and its power
  runs       run directories under build/bench/<run-id>/ (atomic writes) and loading them back
  envfacts   environment facts for a summary (profile, images, engine identity, host, time)
  report     `compare`: the table, deltas against the baseline run, McNemar, regression flags
  plot       the PNG (tok/s and TPOT per run, published figures drawn for reference)
  roofline   bytes read per decode step from a checkpoint config.json and the quantization layout
  floor      the recorded baseline speed of this host, which the gate uses as its floor
  published  the published Spark figures (the Ling notebook's Spark recipe)
  run        what `invoke bench` does: resolve the deployment, run, write, summarize
"""
