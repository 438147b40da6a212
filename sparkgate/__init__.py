"""sparkgate: deploy SGLang + Ling-3.0-flash on a DGX Spark and admit traffic only once each requested
optimization is proven engaged.

The pipeline, stage by stage (each stage only reads what the one before it produced):

1. profile        profiles/<name>.yaml is read and its `extends:` merged ........ sparkgate.profile.loading
2. model          validated into frozen models, once, at the boundary ........... sparkgate.profile.model
                  (one module per optimization: sparkgate.optimizations.*)
3. launch plan    the engine's argv + env, each item traced to its profile field . sparkgate.bundle.launch
                  (flag names spelled once in sparkgate.sglang.flags; checked
                  against SGLang's own flag table, sparkgate.sglang.parser)
4. rules          cross-field refusals over the final launch ..................... sparkgate.profile.rules
5. render         build/<name>/: compose.yaml, argv.json, expectations.json, ...  sparkgate.bundle.render,
                                                                                   sparkgate.bundle.expectations
6. deploy         preflight, compose up, follow startup, wait for the verdict .... sparkgate.deploy
                  (the engine container starts via sparkgate.runtime.engine_entrypoint)
7. sentinel /     prove each optimization from runtime evidence, then keep ....... sparkgate.sentinel,
   evidence       re-checking; the verdict decides admission                     sparkgate.evidence
8. gateway        HAProxy, the only published port, routes only while ready ...... sparkgate.runtime.gateway,
                                                                                   sparkgate.runtime.gateway_routes
9. bench / fleet  measure a deployed profile; roll one across Sparks ............ sparkgate.bench, sparkgate.fleet

Images (the runtime image, the Spark engine) are built by sparkgate.bundle.image_build from the pins that
sparkgate.images reads; what SGLang itself spells and logs lives in sparkgate.sglang.

Front ends: the invoke tasks (sparkgate.tasks) on the host; the `sparkgate` console script (sparkgate.cli) in the
stack's containers and wherever invoke is not (`sparkgate verify`). No command is in both; both call
sparkgate.commands. Not in this package: the in-engine probe plugin (probe/, `sparkgate_probe`) and
the engine simulator for tests and drills (simulator/, `sparkgate_sim`), which the product never imports.
"""

__version__ = "0.1.0"
