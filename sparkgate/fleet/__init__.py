"""Fleet provisioning: the one-machine lab, per-host releases, the Ansible rollout and its report."""
