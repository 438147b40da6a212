"""What sparkgate knows about SGLang, in one place: its flag spellings (flags), its parser's table (parser),
its environment variables (env), the strings the evidence reads (conformance), what the inclusionAI fork adds
(fork), the committed manifests of all of these (data/), and the build guard that proves them against an
installed SGLang (build_guard).

Imports nothing at package level: the simulator imports `sparkgate.sglang.conformance` and
`sparkgate.sglang.parser` without bringing the checker along.
"""
