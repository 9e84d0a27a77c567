"""The webhook's own configuration: the YAML file as a frozen, validated model with defaults."""
