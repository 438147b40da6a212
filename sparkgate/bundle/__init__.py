"""The bundle stage: a validated profile becomes what a deployment runs - the engine's argv and environment
(launch), the compose project, gateway and Prometheus files (render, monitoring), the sentinel's expectations
(expectations), the images (image_build) and the profile's JSON Schema (schema)."""
