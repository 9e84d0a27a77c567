"""CRL policies: ConfigMaps to limitations, the policy set, resource rules, native export."""
