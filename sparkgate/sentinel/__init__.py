"""The sentinel: decides admission. It proves the engine (verification + testinfra + smoke) before any
traffic is admitted, keeps re-checking, and serves /ready for the gateway's health checks."""
