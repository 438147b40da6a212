"""What runs inside the containers beside the sentinel: the engine entrypoint, the gateway and its route
allow-list, the container healthcheck, the admin key and the secret files both are written to."""
